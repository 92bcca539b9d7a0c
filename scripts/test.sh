#!/usr/bin/env bash
# Installs the dependencies, builds everything and runs every test. GPU tests skip where no GPU exists.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install_deps.sh
./scripts/build.sh
cd build
ctest --output-on-failure -j "$(nproc)" --timeout 900
