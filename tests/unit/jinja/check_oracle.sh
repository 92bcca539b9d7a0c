#!/usr/bin/env bash
# Re-renders the corpus with the live oracle, @huggingface/jinja at the version pinned in
# oracle/package-lock.json, and diffs the result against the committed expected/ outputs.
# Needs node, npm and the npm registry. Nothing is written into the source tree.
# Usage: check_oracle.sh [work dir]   (default: a fresh temporary directory)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
work="${1:-$(mktemp -d)}"
mkdir -p "$work"
cp "$here/oracle/package.json" "$here/oracle/package-lock.json" "$here/oracle/render.mjs" "$work/"
(cd "$work" && npm ci --no-audit --no-fund --loglevel=error)
node "$work/render.mjs" "$here/corpus" "$work/expected"
diff -r "$here/expected" "$work/expected"
echo "@huggingface/jinja renders the corpus exactly as expected/ says"
