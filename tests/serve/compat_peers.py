#!/usr/bin/env python3
"""Shared by the compatible front doors' end-to-end tests (e2e_compat.py,
e2e_compat_scripted.py): a real sv-serve on 127.0.0.1, and stand-ins of
the peers' clients written from their public protocol descriptions:

- verl posts SandboxFusion's /run_code body, retries only on 504 (after
  1 s, then 2 s) and reads `status`, `compile_result` and `run_result`;
- SkyRL posts {"language", "code", "stdin", "run_timeout"} and reads
  `status` and `run_result.stdout`;
- NeMo-Skills posts /execute and reads `process_status`, `stdout`,
  `stderr`.

Standard library only; every wait is bounded.
"""

import http.client
import json
import os
import re
import select
import signal
import subprocess
import threading
import time

TIMEOUT = 60  # seconds, for any one HTTP exchange (the machine may be busy)
SKIP = 77


def check(cond, what, server=None):
    if not cond:
        if server is not None:
            print("--- stderr of sv-serve ---\n" + server.stderr_tail())
        raise AssertionError(what)


class Server:
    """The real sv-serve on port 0; stopped (bounded) on exit."""

    def __init__(self, binary, tmp, args, name, listen="127.0.0.1:0"):
        self.err_path = os.path.join(tmp, name + ".stderr")
        self.err = open(self.err_path, "w")
        self.proc = subprocess.Popen(
            [binary, "--listen", listen, "--log-level", "info", *args],
            stdout=subprocess.PIPE, stderr=self.err, text=True)
        ready, _, _ = select.select([self.proc.stdout], [], [], 60)
        line = self.proc.stdout.readline() if ready else ""
        m = re.fullmatch(r"listening on [0-9.]+:(\d+)\n", line)
        check(m is not None, f"no 'listening on' line: {line!r}", self)
        self.port = int(m.group(1))
        self.token = None
        if "--token-file" in args:  # /metrics needs its first token
            with open(args[args.index("--token-file") + 1]) as f:
                self.token = next(
                    (line.strip() for line in f if line.strip()), None)

    def stderr_tail(self):
        if not self.err.closed:
            self.err.flush()
        with open(self.err_path) as f:
            return f.read()[-6000:]

    def request(self, method, path, body=None, headers=None, host="127.0.0.1"):
        c = http.client.HTTPConnection(host, self.port, timeout=TIMEOUT)
        try:
            c.request(method, path, body=body, headers=headers or {})
            r = c.getresponse()
            return r.status, dict(r.getheaders()), r.read()
        finally:
            c.close()

    def post_json(self, path, obj, headers=None):
        status, hdrs, body = self.request(
            "POST", path, json.dumps(obj),
            {"Content-Type": "application/json", **(headers or {})})
        return status, hdrs, json.loads(body) if body else None

    def metrics(self):
        headers = {}
        if self.token is not None:
            headers["Authorization"] = "Bearer " + self.token
        status, _, body = self.request("GET", "/metrics", None, headers)
        check(status == 200, f"/metrics: {status}", self)
        out = {}
        for line in body.decode().splitlines():
            if line and not line.startswith("#"):
                name, value = line.rsplit(" ", 1)
                out[name] = float(value)
        return out

    def stop(self, timeout=60):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
            raise AssertionError(f"sv-serve did not stop within {timeout} s")
        finally:
            self.err.close()


# -- the peers' clients, from their protocol descriptions ---------------------

def verl_style(server, code, stdin=None, expected=None, language="python",
               timeout=10, memory_mb=1024, delays=(1, 2)):
    """verl's reward check of one test case: 504 is retried (3 attempts,
    1 s then 2 s apart); any other HTTP error is an API error. Returns
    (verdict, response, attempts): True / False for a right / wrong answer,
    -1 API or sandbox error, -2 runtime error, -3 timeout, -4 compile
    error."""
    payload = {"compile_timeout": timeout, "run_timeout": timeout,
               "code": code, "stdin": stdin, "memory_limit_MB": memory_mb,
               "language": language, "files": {}, "fetch_files": []}
    response = None
    attempts = 0
    for attempt in range(3):
        attempts += 1
        status, _, body = server.post_json("/run_code", payload)
        if status == 504:
            if attempt < 2:
                time.sleep(delays[attempt])
            continue
        if status != 200:
            return -1, body, attempts
        response = body
        break
    if response is None:
        return -1, None, attempts
    compile_result = response.get("compile_result")
    run_result = response.get("run_result")
    api_status = response.get("status")
    if api_status == "SandboxError":
        return -1, response, attempts
    if api_status == "Failed":
        if compile_result and (
                compile_result["status"] in ("Error", "TimeLimitExceeded") or
                compile_result.get("return_code") != 0):
            return -4, response, attempts
        if run_result:
            if run_result["status"] == "TimeLimitExceeded":
                return -3, response, attempts
            return -2, response, attempts
        return -1, response, attempts
    if api_status == "Success" and run_result and \
            run_result["status"] == "Finished":
        out = run_result["stdout"] or ""
        ok = expected is None or out.rstrip("\n") == expected.rstrip("\n")
        return ok, response, attempts
    return -1, response, attempts


def skyrl_style(server, code, stdin, timeout=10):
    """SkyRL's code check: (passed, output); a non-200 is a failed server."""
    status, _, body = server.post_json(
        "/run_code", {"language": "python", "code": code, "stdin": stdin,
                      "run_timeout": timeout})
    if status != 200:
        return False, f"server answered {status}"
    if body["status"] == "Success":
        return True, body["run_result"]["stdout"]
    return False, (f"STDOUT:\n{body['run_result']['stdout']}\n\n"
                   f"STDERR:\n{body['run_result']['stderr']}")


def nemo_skills_style(server, code, language, timeout=10, std_input="",
                      max_output_characters=1000, headers=None):
    """NeMo-Skills' LocalSandbox.execute_code: the JSON back, whatever the
    status (502 would be a client timeout)."""
    status, _, body = server.post_json(
        "/execute", {"generated_code": code, "std_input": std_input,
                     "timeout": timeout, "language": language,
                     "max_output_characters": max_output_characters,
                     "traceback_verbosity": "Plain"}, headers)
    return status, body


def local_server(binary, tmp, name, extra=()):
    root = os.path.join(tmp, "sandboxes-" + name)
    config = os.path.join(tmp, name + ".provider.json")
    with open(config, "w") as f:
        json.dump({"local": {"root": root}}, f)
    return Server(binary, tmp, ["--provider-config", config, *extra], name), \
        root


def all_stopped(server):
    m = server.metrics()
    created = m.get("sv_sandboxes_created_total", -1)
    stopped = m.get("sv_sandboxes_stopped_total", -2)
    return created == stopped and m.get("sv_sandboxes_live") == 0, m


def wait_all_stopped(server, timeout=30):
    deadline = time.monotonic() + timeout
    while True:
        ok, m = all_stopped(server)
        if ok or time.monotonic() > deadline:
            return ok, m
        time.sleep(0.1)


SQUARE = "n = int(input())\nprint(n * n)\n"

RUNNER_OK = json.dumps({
    "compile_result": None,
    "run_result": {"status": "Finished", "execution_time": 0.01,
                   "return_code": 0, "stdout": "49\n", "stderr": ""},
    "files": {}})


def scripted_server(binary, tmp, name, script, extra=(), probe=True):
    config = os.path.join(tmp, name + ".provider.json")
    script = {"result_text": RUNNER_OK, **script}
    with open(config, "w") as f:
        json.dump({"scripted": script}, f)
    s = Server(binary, tmp, ["--provider-config", config, *extra], name)
    if not probe:
        return s
    # The languages probe (one verification, at the first call of the
    # compatible routes) is done, so every scripted step after it is a
    # call's.
    status, _, _ = s.request("GET", "/v1/languages")
    check(status == 200, f"/v1/languages: {status}", s)
    deadline = time.monotonic() + 30
    while "languages probe" not in s.stderr_tail():
        check(time.monotonic() < deadline, "no languages probe", s)
        time.sleep(0.05)
    return s


def post_in_thread(s, path, body, results):
    def go():
        try:
            results.append(s.post_json(path, body))
        except Exception as e:  # noqa: BLE001 (reported by the caller)
            results.append(("error", repr(e), None))
    t = threading.Thread(target=go)
    t.start()
    return t


def wait_for(what, cond, server, timeout=60):
    deadline = time.monotonic() + timeout
    while not cond():
        check(time.monotonic() < deadline, f"timed out waiting for {what}",
              server)
        time.sleep(0.05)


def write_scripted(tmp, name):
    config = os.path.join(tmp, name + ".provider.json")
    with open(config, "w") as f:
        json.dump({"scripted": {"result_text": RUNNER_OK}}, f)
    return config
