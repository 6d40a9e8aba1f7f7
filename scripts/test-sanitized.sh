#!/usr/bin/env bash
# Builds the project and its tests with AddressSanitizer and
# UndefinedBehaviorSanitizer (Debug) and runs the whole ctest suite there.
# Any report fails the run. Needs what scripts/setup.sh installs.
# Usage: scripts/test-sanitized.sh [BUILD_DIR]   (default: build-asan)
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${1:-build-asan}

cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE=Debug \
  -DSV_SANITIZE=address,undefined -DSV_BUILD_BENCH=OFF
cmake --build "$build_dir" -j "$(nproc)"

supp="$PWD/.ci/ubsan.supp"
export ASAN_OPTIONS="halt_on_error=1:abort_on_error=0:print_stacktrace=1:detect_leaks=1:detect_stack_use_after_return=0${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"
if [ -f "$supp" ]; then
  UBSAN_OPTIONS="$UBSAN_OPTIONS:suppressions=$supp"
fi
# One hung test must not eat the CI budget: every test is bounded.
ctest --test-dir "$build_dir" --output-on-failure --timeout 300 "${@:2}"
