#!/usr/bin/env bash
# Installs the Debian 12 packages sandbox-verification needs and builds the
# programs (sv-grade, sv-serve, sv-node) and libraries; the tests and the
# examples are built by the test command (scripts/test.sh), the benchmark
# programs on demand (bench/README.md). Runs as root, or as a user with sudo.
# Usage: scripts/setup.sh [BUILD_DIR]   (default: build)
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${1:-build}

packages=(
  build-essential cmake          # g++ 12, make, cmake 3.25 (ctest)
  libcaf-dev                     # CAF 0.17.6: core, io, openssl (TLS)
  openssl                        # the CLI: test CAs of the nodes e2e test
  nlohmann-json3-dev libboost1.81-dev libspdlog-dev libcli11-dev
  libyaml-cpp-dev                # YAML provider configs
  libsqlite3-dev libssl-dev      # the result cache (--cache): SQLite, SHA-256
  catch2                         # Catch2 2.13 (tests)
  python3                        # runners, job generator, end-to-end tests
  python3-setuptools python3-wheel python3-pip  # clients/python, built offline
  python3-venv python3-setuptools-whl python3-wheel-whl  # ... into a fresh venv
  bubblewrap                     # isolation of the local provider
  libseccomp-dev pkg-config      # its seccomp filter
  util-linux                     # setpriv: drop to the sandbox's own uid
  zlib1g-dev                     # image layers (gzip) of the local provider
  skopeo                         # pulls images (the local provider's `image`)
  umoci docker-registry          # tests: build test images, a local registry
)

sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then
  if ! command -v sudo > /dev/null; then
    echo "setup.sh: run as root, or install sudo" >&2
    exit 1
  fi
  sudo_cmd=(sudo)
fi
# `env` rather than export: sudo resets the environment.
apt=("${sudo_cmd[@]}" env DEBIAN_FRONTEND=noninteractive apt-get)
"${apt[@]}" update -q
"${apt[@]}" install -y -q --no-install-recommends "${packages[@]}"

cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE=Release
cmake --build "$build_dir" -j "$(nproc)" --target sv_products
