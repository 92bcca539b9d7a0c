#!/usr/bin/env bash
# Builds the English training corpus for the bundled default models from Debian packages only.
#
#   bash tools/train/build_corpus.sh [--out DIR] [--work DIR] [--scale X] [--keep-work]
#
# Needs: apt-get (with `apt-get update` done once), dpkg-deb, python3 (standard library only), groff (for
# the man pages; without it they are skipped), xz-utils not needed (Python writes the .xz).
# Downloads each package with `apt-get download` (no installation, nothing outside the Debian archive),
# unpacks it with `dpkg-deb -x` into a work folder, and runs corpus_extract.py, which pulls the prose out,
# dedupes, shuffles deterministically and splits 99/1.
# Output (default .corpus/ at the repository root, excluded from git through .git/info/exclude):
#   train.txt.xz  valid.txt  manifest.json  packages.txt (name, version, sha256 of every .deb used)
# The same package versions give byte-identical output (check text_sha256 in manifest.json).
set -euo pipefail

REPO="$(cd "$(dirname "$0")/../.." && pwd)"
OUT="$REPO/.corpus"
WORK=""
SCALE=1.0
KEEP=0
while [ $# -gt 0 ]; do
  case "$1" in
    --out) OUT="$2"; shift 2 ;;
    --work) WORK="$2"; shift 2 ;;
    --scale) SCALE="$2"; shift 2 ;;
    --keep-work) KEEP=1; shift ;;
    -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
done
if [ -z "$WORK" ]; then
  WORK="$(mktemp -d /tmp/drift-corpus.XXXXXX)"
else
  KEEP=1
fi
cleanup() { if [ "$KEEP" = 0 ]; then rm -rf "$WORK"; fi; }
trap cleanup EXIT

# Every package is Debian main; the licence of each is in its /usr/share/doc/<pkg>/copyright
# (README.md in this folder lists them).
PACKAGES=(
  dict-gcide dict-devil dict-jargon dict-foldoc   # dictionaries in dictd format
  wordnet-base                                     # WordNet 3.0 glosses
  bible-kjv-text bible-kjv                         # King James Bible (the text, and the program that decodes it)
  fortunes fortunes-min fortune-anarchism fortunes-debian-hints
  python3.11-doc                                   # Python documentation (HTML)
  perl-doc                                         # Perl documentation (POD)
  postgresql-doc-15                                # PostgreSQL manual (HTML)
  debian-reference-en debian-handbook debian-faq maint-guide developers-reference debian-policy
  harden-doc debian-history                        # Debian documentation (HTML)
  gnome-user-docs                                  # GNOME help (Mallard XML)
  git-doc gnu-standards bash-doc                   # git manual, GNU coding standards, Bash reference
  python-django-doc                                # Django documentation (HTML)
  gimp-help-en                                     # GIMP user manual (HTML)
  debian-edu-doc-en                                # Debian Edu manual (HTML)
  manpages manpages-dev                            # Linux man-pages (roff, rendered with groff)
  linux-doc-6.1                                    # Linux kernel documentation (reStructuredText)
  # Battle for Wesnoth campaigns: story and dialogue (WML)
  wesnoth-1.16-httt wesnoth-1.16-tsg wesnoth-1.16-did wesnoth-1.16-dm wesnoth-1.16-dw wesnoth-1.16-ei
  wesnoth-1.16-l wesnoth-1.16-low wesnoth-1.16-nr wesnoth-1.16-sof wesnoth-1.16-sota wesnoth-1.16-sotbe
  wesnoth-1.16-thot wesnoth-1.16-trow wesnoth-1.16-ttb wesnoth-1.16-utbs
)

mkdir -p "$OUT"
echo "work folder: $WORK"
echo "== downloading ${#PACKAGES[@]} packages"
. "$REPO/tools/train/debian_packages.sh"
fetch_packages "$WORK" "$OUT/packages.txt" "${PACKAGES[@]}"
cat "$OUT/packages.txt"

# The KJV text ships compressed in its own format; the bible program of the bible-kjv package decodes it.
BIBLE_TXT="$WORK/kjv.txt"
if [ -x "$WORK/root/bible-kjv/usr/bin/bible" ] && [ -f "$WORK/root/bible-kjv-text/usr/lib/bible.data" ]; then
  if ! "$WORK/root/bible-kjv/usr/bin/bible" -p "$WORK/root/bible-kjv-text/usr/lib" -f "gen1:1-rev22:21" \
      > "$BIBLE_TXT" 2>/dev/null </dev/null; then
    echo "WARNING: the bible program did not run (libreadline8 missing?); KJV skipped" >&2
    rm -f "$BIBLE_TXT"
  fi
fi

echo "== extracting prose"
nice python3 "$REPO/tools/train/corpus_extract.py" --root "$WORK/root" --out "$OUT" --scale "$SCALE" \
  ${BIBLE_TXT:+--bible-text "$BIBLE_TXT"}

# Keep the corpus out of git without touching .gitignore.
EXCLUDE="$REPO/.git/info/exclude"
if [ -d "$REPO/.git" ]; then
  mkdir -p "$REPO/.git/info"
  rel="/${OUT#"$REPO"/}/"
  case "$OUT" in "$REPO"/*) grep -qxF "$rel" "$EXCLUDE" 2>/dev/null || echo "$rel" >> "$EXCLUDE" ;; esac
fi
ls -l "$OUT"
