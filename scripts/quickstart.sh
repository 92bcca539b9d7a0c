#!/usr/bin/env bash
# Installs the dependencies, builds Drift, makes `import drift` work in Debian's python3 (when the
# binding was built) and generates text with the bundled default model.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install_deps.sh
./scripts/build.sh
# `import drift` in this user's Debian python3: a .pth file in its user site-packages names build/python.
if compgen -G "build/python/drift/_drift*.so" > /dev/null; then
  user_site=$(/usr/bin/python3 -m site --user-site)
  mkdir -p "$user_site"
  echo "$PWD/build/python" > "$user_site/drift.pth"
fi
./build/apps/drift/drift generate --prompt "${1:-The meaning of life is}" --max-tokens 32
