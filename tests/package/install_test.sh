#!/usr/bin/env bash
# The package as an outside project sees it: install the build tree into a
# temporary prefix, configure examples/embed against it alone (no source
# tree on its include path), build it and grade one submission with it;
# then the same for examples/testing, a user's message-level test built on
# the test kit (find_package(... COMPONENTS testing)), and run its tests.
# Usage: install_test.sh BUILD_DIR SOURCE_DIR PYTHON
set -euo pipefail
build=$1 src=$2 python=$3
tmp=$(mktemp -d /tmp/sv-install-test-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/prefix" > "$tmp/install.log"
test -x "$tmp/prefix/bin/sv-grade"
test -f "$tmp/prefix/include/sandbox_verification/messages/protocol.hpp"
test -f "$tmp/prefix/lib/cmake/sandbox_verification/sandbox_verificationConfig.cmake"
test -f "$tmp/prefix/include/sandbox_verification/testing/grading_bench.hpp"
test -f "$tmp/prefix/lib/libsv_testing.a"
# Configure like a stranger: the prefix only, the compiler and flags of the
# build (a sanitized library needs its runtime linked), ccache when set.
launcher=$(sed -n 's/^CMAKE_CXX_COMPILER_LAUNCHER:[A-Z]*=//p' "$build/CMakeCache.txt")
cxx=$(sed -n 's/^CMAKE_CXX_COMPILER:[A-Z]*=//p' "$build/CMakeCache.txt")
type=$(sed -n 's/^CMAKE_BUILD_TYPE:[A-Z]*=//p' "$build/CMakeCache.txt")
build_example() { # NAME: examples/NAME into $tmp/NAME
  cmake -S "$src/examples/$1" -B "$tmp/$1" \
        -DCMAKE_PREFIX_PATH="$tmp/prefix" -DCMAKE_CXX_COMPILER="$cxx" \
        -DCMAKE_BUILD_TYPE="${type:-Release}" \
        ${launcher:+-DCMAKE_CXX_COMPILER_LAUNCHER=$launcher} > "$tmp/configure-$1.log" \
    || { cat "$tmp/configure-$1.log"; exit 1; }
  cmake --build "$tmp/$1" -j2 > "$tmp/build-$1.log" || { cat "$tmp/build-$1.log"; exit 1; }
  # It must have compiled against the installed headers, not the tree.
  if grep -rq -- "-I$src" "$tmp/$1" --include=flags.make; then
    echo "examples/$1 saw the source tree's headers" >&2
    exit 1
  fi
}
# The installed headers are exactly the library's headers outside detail/
# folders (DESIGN.md, "Layout": public or internal, by path), and every one
# compiles against the prefix alone (a public header that includes an
# internal, uninstalled one fails here: one translation unit of them all,
# to keep this cheap).
inc="$tmp/prefix/include/sandbox_verification"
(cd "$src" && find messages actors cache providers facade service testing \
   -name '*.hpp' -not -path '*/detail/*' | sort) > "$tmp/public_in_tree"
(cd "$inc" && find . -name '*.hpp' | sed 's|^\./||' | sort) > "$tmp/installed"
if ! diff "$tmp/public_in_tree" "$tmp/installed" >&2; then
  echo "installed headers differ from the tree's headers outside detail/" \
       "(< in the tree only, > installed only)" >&2
  exit 1
fi
(cd "$inc" && find . -name '*.hpp' | sort | sed 's|^\./\(.*\)|#include "\1"|') \
  > "$tmp/all_headers.cpp"
test "$(wc -l < "$tmp/all_headers.cpp")" -ge 20
"$cxx" -std=c++17 -fsyntax-only -I"$inc" "$tmp/all_headers.cpp" \
  || { echo "the installed headers do not compile against the prefix" >&2; exit 1; }
build_example embed
"$tmp/embed/sv-embed-example" "$python"
"$tmp/embed/sv-grader-example" "$python" | grep -qx "reward: 1.0"
build_example testing
"$tmp/testing/reward-service-test"
# The protocol alone: a consumer that only reads and writes the batch
# format links sandbox_verification::protocol, without the actors, the
# providers or CAF's network modules.
mkdir -p "$tmp/protocol_src"
cat > "$tmp/protocol_src/CMakeLists.txt" <<'CMAKE'
cmake_minimum_required(VERSION 3.16)
project(protocol_only CXX)
find_package(sandbox_verification REQUIRED COMPONENTS protocol)
add_executable(protocol-only main.cpp)
target_link_libraries(protocol-only PRIVATE sandbox_verification::protocol)
CMAKE
cat > "$tmp/protocol_src/main.cpp" <<'CPP'
#include "messages/json.hpp"

#include <iostream>

int main() {
  auto line = R"({"id": "t#1", "files": {"sandbox_runner.py": "pass"},
                  "request": {"k": 1}, "exec_timeout_s": 5})";
  auto req = nlohmann::json::parse(line).get<sv::verification_request>();
  std::cout << req.id << ' ' << req.exec_timeout_s << '\n';
}
CPP
cmake -S "$tmp/protocol_src" -B "$tmp/protocol" -DCMAKE_PREFIX_PATH="$tmp/prefix" \
      -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_BUILD_TYPE="${type:-Release}" \
      ${launcher:+-DCMAKE_CXX_COMPILER_LAUNCHER=$launcher} > "$tmp/configure-protocol.log" \
  || { cat "$tmp/configure-protocol.log"; exit 1; }
cmake --build "$tmp/protocol" > "$tmp/build-protocol.log" || { cat "$tmp/build-protocol.log"; exit 1; }
if grep -rqE "libsv\.a|libsv_runtime\.a|caf_io|caf_openssl" "$tmp/protocol" --include=link.txt; then
  echo "the protocol alone linked more than the protocol" >&2
  exit 1
fi
test "$("$tmp/protocol/protocol-only")" = "t#1 5"
