# Sourced by build_corpus.sh and build_dialogues.sh.
# fetch_packages WORK LIST PACKAGE...: `apt-get download` each package into WORK/debs (nothing installed,
# nothing from outside the Debian archive), unpack each into WORK/root/PACKAGE with `dpkg-deb -x`, and write
# "name <tab> version <tab> sha256 of the .deb" per package to LIST. A package that cannot be downloaded is
# skipped with a warning.
fetch_packages() {
  local work=$1 list=$2
  shift 2
  mkdir -p "$work/debs" "$work/root"
  ( cd "$work/debs" && for p in "$@"; do
      ls "$p"_*.deb >/dev/null 2>&1 || nice apt-get download -q "$p" 2>&1 | grep -v -e '^W: Download is performed unsandboxed' || true
    done )
  : > "$list"
  local p deb
  for p in "$@"; do
    deb=$(ls "$work/debs/${p}"_*.deb 2>/dev/null | head -n1 || true)
    if [ -z "$deb" ]; then echo "WARNING: $p could not be downloaded; skipped" >&2; continue; fi
    echo -e "$p\t$(dpkg-deb -f "$deb" Version)\t$(sha256sum "$deb" | cut -d' ' -f1)" >> "$list"
    [ -d "$work/root/$p" ] || { mkdir -p "$work/root/$p" && nice dpkg-deb -x "$deb" "$work/root/$p"; }
  done
}
