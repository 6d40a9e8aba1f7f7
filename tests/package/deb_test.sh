#!/usr/bin/env bash
# `cpack -G DEB` builds a .deb holding the apps, the headers, the library and
# its CMake package, and the Python package sv_client with the dist-info that
# makes NeMo Gym find its provider (entry point sv_serve), depending on
# Debian's package names.
# Usage: deb_test.sh BUILD_DIR [PYTHON]   (exits 77, skipped, without dpkg-deb)
set -euo pipefail
build=$1
python=${2:-python3}
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
         ./usr/lib/cmake/sandbox_verification/sandbox_verificationConfig.cmake \
         ./usr/lib/python3/dist-packages/sv_client/__init__.py \
         ./usr/lib/python3/dist-packages/sv_client/nemo_gym.py \
         ./usr/lib/python3/dist-packages/sandbox_verification_client-0.1.0.dist-info/entry_points.txt; do
  grep -q " $f\$" "$tmp/contents" || { echo "$deb lacks $f" >&2; exit 1; }
done
depends=$(dpkg-deb -f "$deb" Depends)
for p in libcaf-dev nlohmann-json3-dev libboost1.81-dev libspdlog-dev libyaml-cpp-dev \
         libsqlite3-0 libssl3; do
  [[ $depends == *"$p"* ]] || { echo "Depends lacks $p: $depends" >&2; exit 1; }
done
# The Python package as installed from the .deb: NeMo Gym's registry looks
# its provider up by entry point (importlib.metadata).
mkdir "$tmp/root"
dpkg-deb -x "$deb" "$tmp/root"
site="$tmp/root/usr/lib/python3/dist-packages"
(cd "$tmp" && PYTHONPATH="$site" "$python" - "$site" <<'EOF'
import sys
from importlib import metadata
site = sys.argv[1]
eps = [ep for ep in metadata.entry_points(group="nemo_gym.sandbox_providers")
       if ep.name == "sv_serve"]
assert len(eps) == 1, eps
cls = eps[0].load()
assert cls.__name__ == "SvServeProvider", cls
assert sys.modules[cls.__module__].__file__.startswith(site), cls.__module__
import sv_client
assert metadata.version("sandbox-verification-client") == sv_client.__version__
EOF
) || { echo "the .deb's Python package does not load its entry point" >&2; exit 1; }
echo "ok: $(basename "$deb"): $depends"
