#!/usr/bin/env bash
# `cpack -G DEB` builds a .deb holding the apps, the headers, the library and
# its CMake package, depending on Debian's package names.
# Usage: deb_test.sh BUILD_DIR   (exits 77, skipped, without dpkg-deb)
set -euo pipefail
build=$1
command -v dpkg-deb > /dev/null || exit 77
tmp=$(mktemp -d /tmp/sv-deb-test-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && cpack -G DEB --config "$build/CPackConfig.cmake" -B "$tmp" \
   > "$tmp/cpack.log") || { cat "$tmp/cpack.log"; exit 1; }
deb=$(ls "$tmp"/*.deb)
dpkg-deb -c "$deb" > "$tmp/contents"
for f in ./usr/bin/sv-grade ./usr/lib/libsv.a \
         ./usr/include/sandbox_verification/messages/protocol.hpp \
         ./usr/include/sandbox_verification/testing/grading_bench.hpp \
         ./usr/lib/libsv_testing.a \
         ./usr/lib/cmake/sandbox_verification/sandbox_verificationConfig.cmake; do
  grep -q " $f\$" "$tmp/contents" || { echo "$deb lacks $f" >&2; exit 1; }
done
depends=$(dpkg-deb -f "$deb" Depends)
for p in libcaf-dev nlohmann-json3-dev libboost1.81-dev libspdlog-dev libyaml-cpp-dev \
         libsqlite3-0 libssl3; do
  [[ $depends == *"$p"* ]] || { echo "Depends lacks $p: $depends" >&2; exit 1; }
done
echo "ok: $(basename "$deb"): $depends"
