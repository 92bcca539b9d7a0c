#!/usr/bin/env bash
# Re-encodes the corpus with the live oracle, the npm package `tiktoken` at the version pinned in
# package-lock.json, and diffs the ids against the committed expected.json; also checks that the committed
# ranks (tests/fixtures/tokenizers/o200k_base/o200k_base.json) are still the package's file.
# Needs node, npm and the npm registry. Nothing is written into the source tree.
# Usage: check_oracle.sh [work dir]   (default: a fresh temporary directory)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
fixture="$here/../../../fixtures/tokenizers/o200k_base/o200k_base.json"
work="${1:-$(mktemp -d)}"
mkdir -p "$work"
cp "$here/package.json" "$here/package-lock.json" "$here/encode.mjs" "$work/"
(cd "$work" && npm ci --no-audit --no-fund --loglevel=error)
cmp "$fixture" "$work/node_modules/tiktoken/encoders/o200k_base.json"
node "$work/encode.mjs" "$here/texts.json" "$work/expected.json"
diff "$here/expected.json" "$work/expected.json"
echo "tiktoken encodes the corpus exactly as expected.json says, from the committed ranks"
