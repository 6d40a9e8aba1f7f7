#!/usr/bin/env python3
"""The Python package (clients/python) installed into a fresh venv, offline
(``pip install --no-index --no-build-isolation``), and found the way NeMo
Gym's registry finds a provider it does not ship: the entry point ``sv_serve``
of the group ``nemo_gym.sandbox_providers`` (importlib.metadata). Then, from
the venv alone (not the source tree), a NeMo Gym-style block drives a real
sv-serve: the provider's create/exec/close and the seed's function.

Called as: e2e_package.py SV_SERVE PYTHON PACKAGE_DIR
Skipped (77) when PYTHON has no venv module (Debian: python3-venv).
"""

import os
import shutil
import subprocess
import sys
import tempfile

import svtest

WHEELS = "/usr/share/python-wheels"  # Debian's *-whl packages

# Runs in the venv's python: nothing of the source tree on its path.
PROBE = r'''
import asyncio, json, sys
from importlib import metadata
before = set(sys.modules)

found = [ep for ep in metadata.entry_points(group="nemo_gym.sandbox_providers")
         if ep.name == "sv_serve"]
assert len(found) == 1, found
ep = found[0]
assert ep.value == "sv_client.nemo_gym:SvServeProvider", ep.value
cls = ep.load()
import sv_client
assert sv_client.__file__.startswith(sys.prefix), (sv_client.__file__,
                                                    sys.prefix)
dist = metadata.distribution("sandbox-verification-client")
assert dist.version == sv_client.__version__, dist.version
assert not dist.requires, dist.requires  # standard library only
foreign = sorted(m for m in set(sys.modules) - before
                 if m.split(".")[0] not in sys.stdlib_module_names
                 and m.split(".")[0] != "sv_client")
assert not foreign, foreign

block = json.loads(sys.argv[1])       # sandbox: {sv_serve: {url: ...}}
(name, settings), = block.items()
assert name == ep.name
provider = cls(**settings)            # what NeMo Gym's create_provider does
from sv_client._nemo_types import SandboxSpec

async def main():
    handle = await provider.create(SandboxSpec(ready_timeout_s=10))
    result = await provider.exec(handle, "echo hi")
    await provider.close(handle)
    graded = await sv_client.run_verification_sandbox(
        block, {"ready_timeout_s": 10}, {"sandbox_runner.py": ""}, {}, 5, None)
    await provider.aclose()
    return result, graded

result, graded = asyncio.run(main())
assert result.return_code == 0 and result.error_type is None, result
assert graded == {"reward": 1.0}, graded
print("ok:", ep.name, "->", cls.__module__ + "." + cls.__name__, "from",
      sv_client.__file__)
'''


def run(args, **kw):
    return subprocess.run(args, capture_output=True, text=True, timeout=300,
                          **kw)


def fresh_venv(python, tmp):
    venv = os.path.join(tmp, "venv")
    r = run([python, "-m", "venv", venv])
    if r.returncode != 0:
        print(f"SKIPPED: {python} -m venv failed (install python3-venv): "
              f"{r.stderr.strip()[-500:]}")
        sys.exit(svtest.SKIP)
    vpy = os.path.join(venv, "bin", "python")
    if run([vpy, "-c", "import setuptools, wheel"]).returncode != 0:
        # A fresh venv lacks wheel (and, from Python 3.12, setuptools):
        # Debian ships both as wheels, so this stays offline.
        r = run([vpy, "-m", "pip", "install", "--no-index", "--find-links",
                 WHEELS, "setuptools", "wheel"])
        if r.returncode != 0:
            raise SystemExit(f"no setuptools/wheel for the offline build "
                             f"(Debian: python3-setuptools-whl "
                             f"python3-wheel-whl): {r.stdout[-800:]}"
                             f"{r.stderr[-800:]}")
    return vpy


def main():
    if len(sys.argv) != 4:
        sys.exit(f"usage: {sys.argv[0]} SV_SERVE PYTHON PACKAGE_DIR")
    sv_serve, python, package = sys.argv[1:]
    with tempfile.TemporaryDirectory(prefix="sv-package-") as tmp:
        vpy = fresh_venv(python, tmp)
        # A copy: pip builds in the tree it is given (build/, *.egg-info).
        source = os.path.join(tmp, "src")
        shutil.copytree(package, source, ignore=shutil.ignore_patterns(
            "build", "*.egg-info", "__pycache__"))
        r = run([vpy, "-m", "pip", "install", "--no-index",
                 "--no-build-isolation", source])
        if r.returncode != 0:
            raise SystemExit(f"offline install failed:\n{r.stdout[-2000:]}\n"
                             f"{r.stderr[-2000:]}")
        server = svtest.Server(sv_serve, tmp, "serve", {"scripted": {}})
        try:
            block = '{"sv_serve": {"url": "%s"}}' % server.url
            env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
            r = run([vpy, "-c", PROBE, block], cwd=tmp, env=env)
        finally:
            server.stop()
        print(r.stdout, r.stderr, sep="")
        if r.returncode != 0:
            raise SystemExit("the installed package failed its probe")


if __name__ == "__main__":
    main()
