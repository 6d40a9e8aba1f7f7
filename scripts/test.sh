#!/usr/bin/env bash
# Builds what scripts/setup.sh leaves out (the test binaries, the examples)
# and runs the whole ctest suite. Needs what scripts/setup.sh installs.
# Usage: scripts/test.sh [BUILD_DIR [CTEST_ARGS...]]   (default: build,
# --output-on-failure)
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${1:-build}
if [ ! -f "$build_dir/CMakeCache.txt" ]; then
  cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE=Release
fi
cmake --build "$build_dir" -j "$(nproc)"
if [ $# -le 1 ]; then
  set -- "$build_dir" --output-on-failure
fi
ctest --test-dir "$build_dir" "${@:2}"
