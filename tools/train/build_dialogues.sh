#!/usr/bin/env bash
# Builds the synthetic chat dialogues of the chat-tuned default model from Debian packages only.
#
#   bash tools/train/build_dialogues.sh [--out DIR] [--work DIR]
#
# Downloads (`apt-get download`, nothing installed) WordNet, FOLDOC, the Linux man-pages and the packages whose
# man pages describe the everyday commands, unpacks them with `dpkg-deb -x` into WORK/root (only these, so that
# the man pages read are exactly theirs), and runs dialogues.py. --work keeps the folder for a second run.
# Output (default .corpus/, beside the corpus): chat_train.jsonl.gz, chat_valid.jsonl, chat_manifest.json,
# chat_packages.txt (name, version, sha256 of every .deb used). Needs groff for the man pages.
set -euo pipefail

REPO="$(cd "$(dirname "$0")/../.." && pwd)"
OUT="$REPO/.corpus"
WORK=""
while [ $# -gt 0 ]; do
  case "$1" in
    --out) OUT="$2"; shift 2 ;;
    --work) WORK="$2"; shift 2 ;;
    -h|--help) sed -n '2,10p' "$0"; exit 0 ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
done
KEEP=1
if [ -z "$WORK" ]; then WORK="$(mktemp -d /tmp/drift-dialogues.XXXXXX)"; KEEP=0; fi
trap '[ "$KEEP" = 1 ] || rm -rf "$WORK"' EXIT

# All Debian main. Man pages in sections 1 and 8 of these packages become the command questions.
PACKAGES=(
  wordnet-base dict-foldoc manpages manpages-dev
  coreutils findutils grep sed tar gzip bzip2 xz-utils zip unzip util-linux procps psmisc diffutils patch less
  man-db apt dpkg openssh-client git-man rsync curl wget file iputils-ping iproute2 passwd login sudo nano make
  e2fsprogs mount cron at time hostname bc gawk systemd tmux screen htop lsof strace gdb binutils
)

mkdir -p "$OUT"
. "$REPO/tools/train/debian_packages.sh"
fetch_packages "$WORK" "$OUT/chat_packages.txt" "${PACKAGES[@]}"

nice python3 "$REPO/tools/train/dialogues.py" --root "$WORK/root" --out "$OUT"
ls -l "$OUT"
