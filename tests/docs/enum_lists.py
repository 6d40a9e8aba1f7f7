#!/usr/bin/env python3
"""The enum lists the docs give match the code (messages/enums.cpp).

Each check reads one list as a reader would see it in a page and compares it,
in order, with the name table the code serialises. A new state, cause or
kind added to the code without the docs (or the other way round) fails here.
"""
import re
import sys
from pathlib import Path

root = Path(sys.argv[1] if len(sys.argv) > 1 else ".")
code = (root / "messages/enums.cpp").read_text()


def table(name):
    m = re.search(name + r"_names\{(.*?)\};", code, re.S)
    if not m:
        sys.exit(f"messages/enums.cpp: no table {name}_names")
    return re.findall(r'"([a-z_]+)"', m.group(1))


def words(text):
    return re.findall(r"[a-z_]+", text)


failures = []


def check(where, got, want):
    if got != want:
        failures.append(f"{where}: the docs say {got}, the code has {want}")


sv_grade = (root / "docs/sv-grade.md").read_text()
m = re.search(r"`state` is one of (.*?); `cause` one of (.*?)\.\n", sv_grade, re.S)
if not m:
    failures.append("docs/sv-grade.md: the sentence listing states and causes is gone")
else:
    check("docs/sv-grade.md states", words(m.group(1)), table("verification_state"))
    check("docs/sv-grade.md causes", words(m.group(2)), table("failure_cause"))
kinds = re.findall(r"^\| `([a-z_]+)` \|", sv_grade, re.M)
check("docs/sv-grade.md failure_kind table", kinds, table("failure_kind"))

design = (root / "DESIGN.md").read_text()
m = re.search(r"`sandbox_status`: (.*?)\.\n", design)
check("DESIGN.md sandbox_status", words(m.group(1)) if m else [], table("sandbox_status"))
m = re.search(r"error_type: ([a-z_ |\n]*)", design)
check("DESIGN.md exec_result error_type", words(m.group(1)) if m else [],
      table("exec_error_type"))

for f in failures:
    print(f)
print(f"enum lists: {len(failures)} mismatch(es)")
sys.exit(1 if failures else 0)
