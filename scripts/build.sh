#!/usr/bin/env bash
# Configures and builds Drift into build/ (Release); the log is build/build.log. The CUDA backend is
# compiled whenever nvcc exists.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p build
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "$@" > build/build.log 2>&1 || { cat build/build.log; exit 1; }
ninja -C build -j "$(nproc)" >> build/build.log 2>&1 || { tail -n 80 build/build.log; exit 1; }
