#!/usr/bin/env python3
"""sv-serve's compatible front doors end to end (docs/compat.md), real
sockets on 127.0.0.1, standard library only.

The clients here are stand-ins written from the peers' public protocol
descriptions: verl posts SandboxFusion's /run_code body, retries only on 504
(after 1 s, then 2 s) and reads `status`, `compile_result` and `run_result`;
SkyRL posts {"language", "code", "stdin", "run_timeout"} and reads
`status` and `run_result.stdout`; NeMo-Skills posts /execute and reads
`process_status`, `stdout`, `stderr`.

Called as: e2e_compat.py SV_SERVE MODE
  run_code     (local provider) verl's cases: correct, wrong answer, runtime
               error, timeout, compile error and success in C++; SkyRL's
               request; files and fetch_files as bytes; a missing toolchain
               refused by name; 400s naming the field; every sandbox stopped.
  execute      (local provider) python and shell: completed, error,
               timeout, std_input, output cut, IPython refused.
  faults       (scripted provider) a sandbox that fails: 504 SandboxError,
               masked; verl's retry then succeeds; a runner's garbage: 504;
               overload: 504 with Retry-After; /execute: 504.
  tokens       (scripted provider) token rules: 401 unless declared open;
               open routes from loopback without a token; flags checked.
  concurrency  (scripted provider) 1,000 calls at once: each answered 200
               or 504, none dropped; the provider's ledger: every sandbox
               stopped exactly once.
Every wait is bounded.
"""

import base64
import http.client
import json
import os
import re
import select
import selectors
import signal
import socket
import subprocess
import sys
import tempfile
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
        status, _, body = self.request("GET", "/metrics")
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


# -- run_code (local provider) ------------------------------------------------

SQUARE = "n = int(input())\nprint(n * n)\n"
CPP_SUM = ("#include <cstdio>\nint main() { long a, b; "
           "if (scanf(\"%ld %ld\", &a, &b) != 2) return 2; "
           "printf(\"%ld\\n\", a + b); }\n")


def verl_cases(s):
    verdict, r, _ = verl_style(s, SQUARE, "7\n", "49")
    check(verdict is True and r["status"] == "Success"
          and r["compile_result"] is None and r["message"] == ""
          and r["run_result"]["return_code"] == 0
          and r["run_result"]["stdout"] == "49\n"
          and isinstance(r["run_result"]["execution_time"], float)
          and r["files"] == {} and "executor_pod_name" in r,
          f"correct: {verdict} {r}", s)
    # A wrong answer that exits 0: Success, and verl compares the output.
    verdict, r, _ = verl_style(s, SQUARE.replace("n * n", "n + n"), "7\n",
                               "49")
    check(verdict is False and r["status"] == "Success"
          and r["run_result"]["stdout"] == "14\n", f"wrong: {verdict} {r}", s)
    # A wrong answer caught by an assert case (verl appends them): Failed,
    # with the program's output.
    verdict, r, _ = verl_style(s, "print('got', 2 + 2)\nassert 2 + 2 == 5\n")
    rr = r["run_result"]
    check(verdict == -2 and r["status"] == "Failed"
          and rr["status"] == "Finished" and rr["return_code"] == 1
          and rr["stdout"] == "got 4\n" and "AssertionError" in rr["stderr"],
          f"assert: {verdict} {r}", s)
    verdict, r, _ = verl_style(s, "import sys\nprint('x')\n"
                               "sys.exit(int(input()) // 0)\n", "3")
    rr = r["run_result"]
    check(verdict == -2 and r["status"] == "Failed" and rr["return_code"] == 1
          and "ZeroDivisionError" in rr["stderr"] and rr["stdout"] == "x\n",
          f"runtime error: {verdict} {r}", s)
    # (4 s: time for the interpreter to start and print on a busy machine.)
    verdict, r, _ = verl_style(s, "print('started', flush=True)\n"
                               "while True: pass\n", timeout=4)
    rr = r["run_result"]
    check(verdict == -3 and r["status"] == "Failed"
          and rr["status"] == "TimeLimitExceeded" and rr["return_code"] is None
          and rr["stdout"] == "started\n" and rr["execution_time"] >= 4,
          f"timeout: {verdict} {r}", s)
    verdict, r, _ = verl_style(s, "int main() { return undeclared; }\n",
                               language="cpp", timeout=60)
    c = r["compile_result"]
    check(verdict == -4 and r["status"] == "Failed" and r["run_result"] is None
          and c["status"] == "Finished" and c["return_code"] != 0
          and "undeclared" in c["stderr"], f"compile error: {verdict} {r}", s)
    verdict, r, _ = verl_style(s, CPP_SUM, "20 22", "42", language="cpp",
                               timeout=60)
    check(verdict is True and r["compile_result"]["return_code"] == 0,
          f"cpp: {verdict} {r}", s)
    print("ok: verl's cases (correct, wrong, assert, runtime error, timeout, "
          "compile error, C++)")


def skyrl_case(s):
    passed, out = skyrl_style(s, SQUARE, "9")
    check(passed and out == "81\n", f"SkyRL: {passed} {out!r}", s)
    passed, out = skyrl_style(s, "raise ValueError('no')", None)
    check(not passed and "ValueError: no" in out, f"SkyRL fail: {out!r}", s)
    print("ok: SkyRL's request")


def files_case(s):
    blob = bytes(range(256)) * 4
    code = ("data = open('in/data.bin', 'rb').read()\n"
            "assert data == bytes(range(256)) * 4, len(data)\n"
            "open('out.bin', 'wb').write(data[::-1])\n"
            "print(open('note.txt').read())\n")
    status, _, r = s.post_json("/run_code", {
        "code": code, "language": "python",
        "files": {"in/data.bin": base64.b64encode(blob).decode(),
                  "note.txt": base64.b64encode("é ok".encode()).decode(),
                  "skipped.txt": None},
        "fetch_files": ["out.bin", "missing.txt", "note.txt"]})
    check(status == 200 and r["status"] == "Success"
          and r["run_result"]["stdout"] == "é ok\n"
          and set(r["files"]) == {"out.bin", "note.txt"}
          and base64.b64decode(r["files"]["out.bin"]) == blob[::-1],
          f"files: {status} {r}", s)
    # Fetching the source itself is allowed.
    status, _, r = s.post_json("/run_code", {
        "code": "pass\n", "language": "python", "fetch_files": ["main.py"]})
    check(status == 200 and base64.b64decode(r["files"]["main.py"]) ==
          b"pass\n", f"fetch source: {status} {r}", s)
    print("ok: files and fetch_files carry bytes")


def refusals(s):
    cases = [
        ({"language": "python"}, "code:"),
        ({"code": "1"}, "language:"),
        ({"code": "1", "language": "cobol"}, 'language: "cobol" is not served'),
        ({"code": "1", "language": "python", "run_timeout": -1},
         "run_timeout:"),
        ({"code": "1", "language": "python", "run_timeout": "10"},
         "run_timeout:"),
        ({"code": "1", "language": "python", "memory_limit_MB": -5},
         "memory_limit_MB:"),
        ({"code": "1", "language": "python", "stdin": 3}, "stdin:"),
        ({"code": "1", "language": "python", "files": {"a": "%%%"}},
         "files.a: not base64"),
        ({"code": "1", "language": "python", "files": {"/etc/x": "eA=="}},
         "files./etc/x:"),
        ({"code": "1", "language": "python", "files": {"../x": "eA=="}},
         "files.../x:"),
        ({"code": "1", "language": "python", "files": {"main.py": "eA=="}},
         "source file"),
        ({"code": "1", "language": "python", "files": {"result.json": "e30="}},
         "runner"),
        ({"code": "1", "language": "python", "fetch_files": ["/etc/passwd"]},
         "fetch_files[0]:"),
        ({"code": "1", "language": "python", "timeout": 3}, "timeout"),
    ]
    for body, needle in cases:
        status, _, r = s.post_json("/run_code", body)
        check(status == 400 and r["status"] == "SandboxError"
              and needle in r["message"] and r["run_result"] is None,
              f"refusal of {body}: {status} {r}", s)
    status, _, body = s.request("POST", "/run_code", "{not json")
    check(status == 400 and "body: not JSON" in json.loads(body)["message"],
          f"not JSON: {status} {body}", s)
    status, headers, _ = s.request("GET", "/run_code")
    check(status == 405 and headers.get("Allow") == "POST", f"405: {status}", s)
    print("ok: bad requests refused (400) naming the field")


def toolchains(s):
    # The probe runs at start; a call before it ends is refused by the runner
    # with the same words.
    for _ in range(2):
        status, _, r = s.post_json("/run_code", {
            "code": "x", "language": "fortran"})
        check(status == 400 and r["status"] == "SandboxError"
              and 'language: "fortran"' in r["message"]
              and 'program "sv-no-such-compiler" not found' in r["message"],
              f"missing toolchain: {status} {r}", s)
    status, _, body = s.request("GET", "/v1/languages")
    table = {x["name"]: x for x in json.loads(body)["languages"]}
    check(status == 200 and table["fortran"]["available"] is False
          and "sv-no-such-compiler" in table["fortran"]["reason"]
          and table["python"]["available"] is True
          and table["cpp"]["compiled"] is True
          and {"python", "bash", "cpp", "c", "nodejs", "go", "java",
               "rust"} <= set(table), f"languages: {table}", s)
    status, _, body = s.request("GET", "/v1/ping")
    check(status == 200 and json.loads(body) == "pong", f"ping {body}", s)
    print("ok: a missing toolchain refused by name; /v1/languages, /v1/ping")


def memory_case(s):
    if "(memory cgroup)" not in s.stderr_tail():
        print("note: no memory cgroup here: memory_limit_MB not exercised")
        return
    status, _, r = s.post_json("/run_code", {
        "code": "x = bytearray(400 << 20)\nprint('survived')\n",
        "language": "python", "memory_limit_MB": 128})
    rr = r["run_result"]
    check(status == 200 and r["status"] == "Failed" and rr["return_code"] != 0
          and "survived" not in rr["stdout"], f"memory: {status} {r}", s)
    print("ok: memory_limit_MB is the sandbox's memory")


def run_code_mode(binary, tmp):
    config = os.path.join(tmp, "compat.json")
    with open(config, "w") as f:
        json.dump({"languages": {"fortran": {
            "source": "main.f90", "compile": ["sv-no-such-compiler",
                                              "main.f90"],
            "run": ["./main"]}}}, f)
    s, root = local_server(binary, tmp, "run_code",
                           ["--compat-config", config])
    try:
        verl_cases(s)
        skyrl_case(s)
        files_case(s)
        refusals(s)
        toolchains(s)
        memory_case(s)
        ok, m = wait_all_stopped(s)
        check(ok, f"sandboxes left: {m}", s)
        check(s.stop() == 0, "exit status", s)
        left = os.listdir(root) if os.path.isdir(root) else []
        check(not [x for x in left if not x.startswith(".")],
              f"left under the sandbox root: {left}")
    finally:
        if s.proc.poll() is None:
            s.stop()
    print("ok: every sandbox stopped")


# -- execute (local provider) -------------------------------------------------

def execute_mode(binary, tmp):
    s, _ = local_server(binary, tmp, "execute")
    try:
        status, r = nemo_skills_style(
            s, "import sys\nprint(sys.stdin.read().upper())\nprint(1/0)\n",
            "python", std_input="abc")
        check(status == 200 and list(r) == ["process_status", "stdout",
                                            "stderr"]
              and r["process_status"] == "completed"
              and r["stdout"] == "ABC\n" and "ZeroDivisionError" in r["stderr"],
              f"python: {status} {r}", s)
        status, r = nemo_skills_style(s, "print('é' * 30)", "python3",
                                      max_output_characters=10)
        check(status == 200 and r["stdout"] == "é" * 10 + "<output cut>",
              f"cut: {status} {r}", s)
        status, r = nemo_skills_style(s, "echo out; echo err >&2; exit 3",
                                      "shell")
        check(status == 200 and r == {"process_status": "error",
                                      "stdout": "out\n", "stderr": "err\n"},
              f"shell: {status} {r}", s)
        status, r = nemo_skills_style(s, "echo fine", "shell")
        check(status == 200 and r["process_status"] == "completed"
              and r["stdout"] == "fine\n", f"shell ok: {status} {r}", s)
        status, r = nemo_skills_style(s, "import time\ntime.sleep(30)",
                                      "python", timeout=1.0)
        check(status == 200 and r == {
            "process_status": "timeout", "stdout": "",
            "stderr": "Execution timed out after 1.0 seconds\n"},
            f"timeout: {status} {r}", s)
        status, r = nemo_skills_style(s, "sleep 30", "shell", timeout=1)
        check(status == 200 and r["process_status"] == "timeout"
              and r["stderr"] == "Execution timed out after 1 seconds\n",
              f"shell timeout: {status} {r}", s)
        for lang, headers, needle in [
                ("ipython", None, '"ipython"'),
                ("python", {"X-Session-ID": "s1"}, "X-Session-ID"),
                ("lean4", None, 'language: "lean4" is not served')]:
            status, r = nemo_skills_style(s, "1", lang, headers=headers)
            check(status == 400 and needle in r["error"],
                  f"refused {lang}: {status} {r}", s)
        status, _, r = s.post_json("/execute", {"generated_code": "1"})
        check(status == 400 and "timeout" in r["error"], f"no timeout: {r}", s)
        status, _, body = s.request("GET", "/health")
        check(status == 200 and json.loads(body)["status"] == "healthy",
              f"health: {status}", s)
        ok, m = wait_all_stopped(s)
        check(ok, f"sandboxes left: {m}", s)
        check(s.stop() == 0, "exit status", s)
    finally:
        if s.proc.poll() is None:
            s.stop()
    print("ok: /execute (python, shell, timeout, output cut, refusals)")


# -- faults (scripted provider) -------------------------------------------------

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


def retry_case(binary, tmp):
    s = scripted_server(binary, tmp, "retry", {
        "steps": {"create": ["ok", "error", "error"]}})
    try:
        status, headers, r = s.post_json("/run_code", {
            "code": SQUARE, "language": "python", "stdin": "7"})
        check(status == 504 and r["status"] == "SandboxError"
              and r["mask_sample"] is True
              and r["failure_kind"] == "provider_unavailable"
              and "create" in r["message"] and r["run_result"] is None,
              f"sandbox down: {status} {r}", s)
        t0 = time.monotonic()
        verdict, r, attempts = verl_style(s, SQUARE, "7", "49")
        check(verdict is True and attempts == 2
              and time.monotonic() - t0 >= 1.0,
              f"verl's retry: {verdict} after {attempts} attempts {r}", s)
        check(s.stop() == 0, "exit status", s)
    finally:
        if s.proc.poll() is None:
            s.stop()
    print("ok: a sandbox that fails is 504 SandboxError (masked); verl's "
          "retry then succeeds")


def malformed_case(binary, tmp):
    s = scripted_server(binary, tmp, "garbage", {
        "result_text": json.dumps({"run_result": {"status": "Maybe"}})})
    try:
        status, _, r = s.post_json("/run_code", {"code": "1",
                                                 "language": "python"})
        check(status == 504 and r["status"] == "SandboxError"
              and r["failure_kind"] == "verifier_error"
              and "malformed" in r["message"], f"garbage: {status} {r}", s)
        status, r = nemo_skills_style(s, "1", "python")
        check(status == 504 and r["process_status"] == "error"
              and r["mask_sample"] is True and "malformed" in r["stderr"],
              f"execute garbage: {status} {r}", s)
        check(s.stop() == 0, "exit status", s)
    finally:
        if s.proc.poll() is None:
            s.stop()
    s = scripted_server(binary, tmp, "runner-dies", {
        "steps": {"exec": ["ok", "garbage"]}})
    try:
        verdict, r, attempts = verl_style(s, "1", delays=(0.1, 0.1))
        check(verdict is True and attempts == 2, f"verl after a runner "
              f"fault: {verdict} {attempts} {r}", s)
        check(s.stop() == 0, "exit status", s)
    finally:
        if s.proc.poll() is None:
            s.stop()
    print("ok: a runner's garbage or fault is 504, never a wrong answer")


def post_in_thread(s, path, body, results):
    import threading

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


def overload_and_drain_case(binary, tmp):
    # Each call's runner takes 10 s; the test moves on by the server's own
    # counters, never by a sleep.
    slow = {"fault": "delay", "delay_ms": 10000}
    s = scripted_server(binary, tmp, "overload", {
        "steps": {"exec": ["ok", slow, slow]}},
        ["--concurrency", "1", "--max-queue", "1"])
    try:
        results = []
        body = {"code": "1", "language": "python"}
        threads = [post_in_thread(s, "/run_code", body, results)]
        wait_for("one call running",
                 lambda: s.metrics().get("sv_supervisor_in_flight") == 1, s)
        threads.append(post_in_thread(s, "/run_code", body, results))
        wait_for("one call queued",
                 lambda: s.metrics().get("sv_queue_depth") == 1, s)
        status, headers, r = s.post_json("/run_code", body)
        check(status == 504 and headers.get("Retry-After") == "1"
              and "overloaded" in r["message"] and r["mask_sample"] is True,
              f"overload: {status} {headers} {r}", s)
        s.proc.send_signal(signal.SIGTERM)
        wait_for("draining", lambda: s.request("GET", "/healthz")[0] == 503,
                 s)
        status, _, r = s.post_json("/run_code", body)
        check(status == 504 and "draining" in r["message"],
              f"draining: {status} {r}", s)
        status, _, _ = s.request("GET", "/v1/ping")
        check(status == 503, f"ping while draining: {status}", s)
        for t in threads:
            t.join(TIMEOUT)
        check([x[0] for x in results] == [200, 200]
              and all(x[2]["status"] == "Success" for x in results),
              f"calls in flight finish: {results}", s)
        # The drain ends by itself once they are answered.
        check(s.proc.wait(TIMEOUT) == 0, "exit status after the drain", s)
    finally:
        if s.proc.poll() is None:
            s.stop()
    print("ok: overload is 504 with Retry-After; a drain answers 504 to new "
          "calls and finishes the ones in flight")


def faults_mode(binary, tmp):
    retry_case(binary, tmp)
    malformed_case(binary, tmp)
    overload_and_drain_case(binary, tmp)


# -- tokens (scripted provider) -------------------------------------------------

def usage_errors(binary, tmp):
    bad_config = os.path.join(tmp, "bad.yaml")
    with open(bad_config, "w") as f:
        f.write("languages:\n  cpp:\n    source: main.cpp\n    runn: [x]\n")
    for args, needle in [
            (["--open-routes", "run_code,verify"], 'unknown route "verify"'),
            (["--open-routes", "run_code", "--open-from", "10.0.0.0/99"],
             "10.0.0.0/99"),
            (["--open-routes", "run_code", "--open-from", "intranet"],
             "not an IP address"),
            (["--open-from", "10.0.0.0/8"], "--open-from needs --open-routes"),
            (["--compat-config", bad_config], "languages.cpp.runn")]:
        p = subprocess.run([binary, "--listen", "127.0.0.1:0", *args],
                           capture_output=True, text=True, timeout=60)
        check(p.returncode == 2 and needle in p.stderr,
              f"{args}: exit {p.returncode} {p.stderr!r}")
    print("ok: bad --open-routes, --open-from, --compat-config: exit 2 naming "
          "the value")


def non_loopback_address():
    """An address of this host that is not loopback, or None."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as u:
            u.connect(("192.0.2.1", 9))  # no packet is sent
            addr = u.getsockname()[0]
    except OSError:
        return None
    return None if addr.startswith("127.") else addr


def tokens_mode(binary, tmp):
    usage_errors(binary, tmp)
    tokens = os.path.join(tmp, "tokens")
    with open(tokens, "w") as f:
        f.write("alice\n")
    auth = {"Authorization": "Bearer alice"}
    code = {"code": "1", "language": "python"}
    execute = {"generated_code": "1", "language": "python", "timeout": 5}
    s = scripted_server(binary, tmp, "closed", {}, ["--token-file", tokens],
                        probe=False)
    try:
        for path, body in [("/run_code", code), ("/execute", execute)]:
            status, headers, _ = s.request("POST", path, json.dumps(body))
            check(status == 401 and headers.get("WWW-Authenticate") ==
                  "Bearer", f"{path} without a token: {status}", s)
            status, _, _ = s.post_json(path, body, auth)
            check(status == 200, f"{path} with a token: {status}", s)
        status, _, _ = s.request("GET", "/v1/languages")
        check(status == 401, f"languages without a token: {status}", s)
        for path in ("/v1/ping", "/health"):
            status, _, _ = s.request("GET", path)
            check(status == 200, f"{path} without a token: {status}", s)
        check(s.stop() == 0, "exit status", s)
    finally:
        if s.proc.poll() is None:
            s.stop()
    s = scripted_server(binary, tmp, "open", {},
                        ["--token-file", tokens, "--open-routes", "run_code"],
                        probe=False)
    try:
        check("/run_code, /v1/languages served WITHOUT a token to 127.0.0.0/8"
              in s.stderr_tail(), "no warning at start", s)
        status, _, r = s.post_json("/run_code", code)
        check(status == 200 and r["status"] == "Success",
              f"open /run_code from loopback: {status} {r}", s)
        status, _, _ = s.request("GET", "/v1/languages")
        check(status == 200, f"open /v1/languages: {status}", s)
        status, _, _ = s.post_json("/execute", execute)
        check(status == 401, f"/execute not declared open: {status}", s)
        status, _, _ = s.request("POST", "/v1/sandboxes", "{}")
        check(status == 401, f"the sandbox API stays closed: {status}", s)
        status, _, _ = s.request("POST", "/v1/verify", "{}")
        check(status == 401, f"/v1/verify stays closed: {status}", s)
        check(s.stop() == 0, "exit status", s)
    finally:
        if s.proc.poll() is None:
            s.stop()
    print("ok: 401 unless declared open; open routes from loopback without a "
          "token; the rest closed")
    addr = non_loopback_address()
    if addr is None:
        print("note: no non-loopback address here: --open-from not exercised "
              "from outside loopback")
        return
    # A documentation network this host is not in, then this host alone.
    outside = "203.0.113.0/24" if addr.startswith("198.51.100.") \
        else "198.51.100.0/24"
    for nets, expect in [(outside, 401), (addr + "/32", 200)]:
        s = Server(binary, tmp, [
            "--provider-config", write_scripted(tmp, "from"),
            "--token-file", tokens, "--open-routes", "run_code,execute",
            "--open-from", nets], "from-" + str(expect), listen="0.0.0.0:0")
        try:
            status, _, _ = s.request("POST", "/run_code", json.dumps(code),
                                     host=addr)
            check(status == expect, f"from {addr} with --open-from {nets}: "
                  f"{status}, expected {expect}", s)
            status, _, _ = s.request("POST", "/execute", json.dumps(execute),
                                     {**auth}, host=addr)
            check(status == 200, f"with a token from {addr}: {status}", s)
            check(s.stop() == 0, "exit status", s)
        finally:
            if s.proc.poll() is None:
                s.stop()
    print(f"ok: --open-from: a peer ({addr}) outside the listed networks "
          "needs a token, one inside does not")


def write_scripted(tmp, name):
    config = os.path.join(tmp, name + ".provider.json")
    with open(config, "w") as f:
        json.dump({"scripted": {"result_text": RUNNER_OK}}, f)
    return config


# -- concurrency (scripted provider) ------------------------------------------

def raise_nofile(n):
    import resource
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < n:
        print(f"note: RLIMIT_NOFILE hard limit {hard} < {n}")
        sys.exit(SKIP)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, n), hard))


def status_of(raw):
    m = re.match(rb"HTTP/1\.1 (\d{3}) ", raw)
    return int(m.group(1)) if m else None


def body_of(raw):
    head, _, body = raw.partition(b"\r\n\r\n")
    return json.loads(body) if body else None


def all_at_once(port, requests, deadline_s):
    """Sends every request on its own connection at once; the raw answers
    (b"" for a connection that ended without one)."""
    sel = selectors.DefaultSelector()
    conns = {}
    for req in requests:
        sock = socket.socket()
        sock.setblocking(False)
        sock.connect_ex(("127.0.0.1", port))
        conns[sock] = {"out": req, "in": b""}
        sel.register(sock, selectors.EVENT_WRITE)
    deadline = time.monotonic() + deadline_s
    left = len(conns)
    while left and time.monotonic() < deadline:
        for key, events in sel.select(timeout=0.5):
            sock, c = key.fileobj, conns[key.fileobj]
            try:
                if events & selectors.EVENT_WRITE:
                    c["out"] = c["out"][sock.send(c["out"]):]
                    if not c["out"]:
                        sel.modify(sock, selectors.EVENT_READ)
                    continue
                chunk = sock.recv(65536)
            except (BlockingIOError, InterruptedError):
                continue
            except OSError:
                chunk = b""
            if chunk:
                c["in"] += chunk
                continue
            left -= 1
            sel.unregister(sock)
    for sock in conns:
        sock.close()
    return [c["in"] for c in conns.values()], left


def concurrency_mode(binary, tmp, n=1000):
    raise_nofile(2 * n + 200)  # sv-serve inherits it
    ledger = os.path.join(tmp, "many.ledger")
    s = scripted_server(binary, tmp, "many", {
        "ledger_file": ledger,
        "steps": {"exec": ["ok"] + [{"fault": "delay", "delay_ms": 20}] * n}},
        ["--max-queue", "300"])
    try:
        requests = []
        for i in range(n):
            if i % 5 == 4:
                path, body = "/execute", {"generated_code": "print(49)",
                                          "language": "python", "timeout": 5}
            else:
                path, body = "/run_code", {"code": SQUARE, "stdin": str(i),
                                           "language": "python"}
            data = json.dumps(body).encode()
            requests.append(
                b"POST " + path.encode() + b" HTTP/1.1\r\nHost: x\r\n"
                b"Connection: close\r\nContent-Type: application/json\r\n"
                b"Content-Length: " + str(len(data)).encode() + b"\r\n\r\n" +
                data)
        answers, left = all_at_once(s.port, requests, 120)
        statuses = [status_of(a) for a in answers]
        bad = [st for st in statuses if st not in (200, 504)]
        check(left == 0 and not bad,
              f"{left} unanswered, others {sorted(set(map(str, bad)))}", s)
        for a, st in zip(answers, statuses):
            r = body_of(a)
            if st == 504:
                check(r.get("mask_sample") is True, f"504 unmasked: {r}", s)
            else:
                check(r.get("status") == "Success" or
                      r.get("process_status") == "completed", f"200: {r}", s)
        ok, m = wait_all_stopped(s)
        check(ok, f"sandboxes left: {m}", s)
        check(s.stop() == 0, "exit status", s)
    finally:
        if s.proc.poll() is None:
            s.stop()
    book = json.loads(open(ledger).read().splitlines()[-1])
    # The probe's sandbox besides the calls'; each stopped exactly once.
    check(book["live"] == 0 and book["not_stopped_once"] == 0
          and book["creates"] == statuses.count(200) + 1,
          f"ledger: {book}, {statuses.count(200)} answered 200")
    print(f"ok: {n} calls at once: {statuses.count(200)} 200, "
          f"{statuses.count(504)} 504 (overloaded, masked), none dropped; "
          f"the ledger: {book['creates']} sandboxes, each stopped once")


def main():
    if len(sys.argv) != 3:
        sys.exit(f"usage: {sys.argv[0]} SV_SERVE MODE")
    binary, mode = sys.argv[1:]
    modes = {"run_code": run_code_mode, "execute": execute_mode,
             "faults": faults_mode, "tokens": tokens_mode,
             "concurrency": concurrency_mode}
    if mode not in modes:
        sys.exit(f"unknown mode {mode}")
    with tempfile.TemporaryDirectory(prefix="sv-compat-") as tmp:
        modes[mode](binary, tmp)


if __name__ == "__main__":
    main()
