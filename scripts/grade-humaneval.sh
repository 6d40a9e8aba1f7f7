#!/usr/bin/env bash
# The main job: grades the 164 canonical HumanEval solutions with sv-grade on
# the local provider, default settings, and checks that every one of them
# gets reward 1.0. Run scripts/setup.sh first.
# Usage: scripts/grade-humaneval.sh [RESULTS]  (default: build/humaneval-results.jsonl)
set -euo pipefail
cd "$(dirname "$0")/.."
results=${1:-build/humaneval-results.jsonl}
jobs=build/humaneval-jobs.jsonl

python3 examples/humaneval/make_jobs.py --variant canonical --output "$jobs"
build/apps/sv-grade --input "$jobs" --output "$results"

python3 - "$jobs" "$results" <<'PY'
import json, sys
jobs = sum(1 for _ in open(sys.argv[1]))
lines = [json.loads(line) for line in open(sys.argv[2])]
full = sum(1 for o in lines if o["ok"] and o["result"].get("reward") == 1.0)
print(f"HumanEval canonical: {full}/{jobs} at reward 1.0 "
      f"(results in {sys.argv[2]})")
sys.exit(0 if full == jobs == len(lines) else 1)
PY
