#!/usr/bin/env bash
# Installs the dependencies, builds Drift and generates text with the bundled default model.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install_deps.sh
./scripts/build.sh
./build/apps/drift/drift generate --prompt "${1:-The meaning of life is}" --max-tokens 32
