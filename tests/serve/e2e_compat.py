#!/usr/bin/env python3
"""sv-serve's compatible front doors end to end on the local provider
(docs/compat.md), real sockets on 127.0.0.1, driven by stand-ins of verl's,
SkyRL's and NeMo-Skills' clients (compat_peers.py). Standard library only.

Called as: e2e_compat.py SV_SERVE MODE
  run_code  verl's cases: correct, wrong answer, runtime error, timeout,
            compile error, compile timeout and success in C++; SkyRL's request; files and
            fetch_files as bytes; a missing toolchain refused by name; every
            shipped language run where its toolchain is installed; 400s
            naming the field; memory_limit_MB; every sandbox stopped.
  execute   python and shell: completed, error, timeout, std_input, output
            cut, IPython and sessions refused.
Every wait is bounded.
"""

import base64
import json
import os
import shutil
import sys
import tempfile

from compat_peers import (SQUARE, check, local_server, nemo_skills_style,
                          skyrl_style, verl_style, wait_all_stopped)

# -- run_code (local provider) ------------------------------------------------
CPP_SUM = ("#include <cstdio>\nint main() { long a, b; "
           "if (scanf(\"%ld %ld\", &a, &b) != 2) return 2; "
           "printf(\"%ld\\n\", a + b); }\n")

# Each constant is about a second of g++'s constexpr evaluation (under its
# per-constant limit of 2^25 operations, so no compile error): the whole
# compile takes minutes.
SLOW_COMPILE = (
    "constexpr long spin(long n, long salt) { long s = salt; "
    "for (long i = 0; i < n; ++i) for (long j = 0; j < n; ++j) "
    "s += (i ^ j ^ salt) % 7; return s; }\n" +
    "".join(f"constexpr long k{i} = spin(1000, {i});\n" for i in range(200)) +
    "int main() { return k0 == k199; }\n")


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
    # compile_timeout is the compile's own: a compile that runs for minutes
    # (a constant evaluated at compile time) ends at 2 s, well before the
    # run's 30 s; verl scores it as a compile error.
    status, _, r = s.post_json("/run_code", {
        "code": SLOW_COMPILE, "language": "cpp", "compile_timeout": 2,
        "run_timeout": 30})
    c = r["compile_result"]
    check(status == 200 and r["status"] == "Failed" and r["run_result"] is None
          and c["status"] == "TimeLimitExceeded" and c["return_code"] is None
          and 2 <= c["execution_time"] < 15, f"compile timeout: {status} {r}",
          s)
    print("ok: verl's cases (correct, wrong, assert, runtime error, timeout, "
          "compile error, C++, compile timeout)")


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
        # Above the local provider's ceiling: refused at create, 400 (the
        # caller's to fix), not 504 (an infrastructure fault).
        ({"code": "1", "language": "python", "memory_limit_MB": 10000000},
         "max_memory_mib"),
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


# Every shipped language but python and cpp (verl_cases runs those): a
# program reading stdin. Its toolchain is on the sandbox's PATH exactly when
# it is on the host's (the local provider's view of the host), so a language
# runs here exactly when its programs are installed, and is refused naming
# the first one missing otherwise.
SHIPPED = {
    "bash": (["bash"], "read n\necho $((n * n))\n"),
    "c": (["gcc"], "#include <stdio.h>\nint main(void) { long n; "
          "if (scanf(\"%ld\", &n) != 1) return 2; "
          "printf(\"%ld\\n\", n * n); return 0; }\n"),
    "nodejs": (["node"], "const n = parseInt(require('fs')"
               ".readFileSync(0, 'utf8'), 10);\nconsole.log(n * n);\n"),
    "java": (["javac", "java"],
             "import java.util.Scanner;\npublic class Main {\n"
             "  public static void main(String[] a) {\n"
             "    long n = new Scanner(System.in).nextLong();\n"
             "    System.out.println(n * n);\n  }\n}\n"),
    "go": (["go"], "package main\nimport \"fmt\"\nfunc main() { "
           "var n int; fmt.Scan(&n); fmt.Println(n * n) }\n"),
    "rust": (["rustc"], "use std::io::Read;\nfn main() { "
             "let mut s = String::new(); "
             "std::io::stdin().read_to_string(&mut s).unwrap(); "
             "let n: i64 = s.trim().parse().unwrap(); "
             "println!(\"{}\", n * n); }\n"),
}
SANDBOX_PATH = "/usr/local/bin:/usr/bin:/bin"


def shipped_languages(s):
    status, _, body = s.request("GET", "/v1/languages")
    table = {x["name"]: x for x in json.loads(body)["languages"]}
    ran, refused = [], []
    for name, (programs, code) in SHIPPED.items():
        missing = [p for p in programs
                   if shutil.which(p, path=SANDBOX_PATH) is None]
        check(table[name]["available"] is (not missing),
              f"{name}: available {table[name]}, missing here {missing}", s)
        verdict, r, _ = verl_style(s, code, "7\n", "49", language=name,
                                   timeout=60)
        if missing:
            check(verdict == -1 and r["status"] == "SandboxError"
                  and f'language: "{name}"' in r["message"]
                  and f'program "{missing[0]}" not found' in r["message"],
                  f"{name} without {missing[0]}: {verdict} {r}", s)
            refused.append(name)
            continue
        check(verdict is True and r["status"] == "Success"
              and r["run_result"]["stdout"] == "49\n"
              and (r["compile_result"] is None) ==
              (not table[name]["compiled"]), f"{name}: {verdict} {r}", s)
        ran.append(name)
    print(f"ok: shipped languages: ran {ran}; refused naming the missing "
          f"program {refused}")


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
        shipped_languages(s)
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


def main():
    if len(sys.argv) != 3:
        sys.exit(f"usage: {sys.argv[0]} SV_SERVE MODE")
    binary, mode = sys.argv[1:]
    modes = {"run_code": run_code_mode, "execute": execute_mode}
    if mode not in modes:
        sys.exit(f"unknown mode {mode}")
    with tempfile.TemporaryDirectory(prefix="sv-compat-") as tmp:
        modes[mode](binary, tmp)


if __name__ == "__main__":
    main()
