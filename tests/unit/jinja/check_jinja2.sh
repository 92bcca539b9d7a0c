#!/usr/bin/env bash
# Checks the test expectations against Python's Jinja2, which is what transformers renders chat
# templates with: the corpus must render exactly as expected/ (written by the npm oracle), and every
# case in cases/ must match Jinja2 except the deliberate differences each such case names.
# Usage: check_jinja2.sh [work dir] [python interpreter]
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
work="${1:-$(mktemp -d)}"
python="${2:-python3}"
mkdir -p "$work"
"$python" "$here/oracle/render_jinja2.py" "$here/corpus" "$work/expected"
diff -r "$here/expected" "$work/expected"
"$python" "$here/oracle/check_cases_jinja2.py" "$here/cases"
