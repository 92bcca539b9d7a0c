#!/usr/bin/env bash
# Packs the Debian build dependencies of tools/gpu/debs.txt into one small archive for the GPU machine:
# the packages unpacked, their static libraries that Drift never links (OpenBLAS, OpenSSL, PCRE2, zlib,
# Brotli, utf8proc) and docs removed, xz-compressed (~9 MB instead of ~20 MB of .debs). A device call's
# working tree is capped at 64 MiB, and the models leave little room. tools/gpu/setup.sh unpacks it when
# it is there; carry it with the run tool (carry: [".gpu-sysroot.tar.xz"]).
#
#   bash tools/gpu/pack_sysroot.sh      # fetches the .debs first if .debs/ is missing
set -euo pipefail
cd "$(dirname "$0")/../.."
if [ ! -d .debs ]; then
  mkdir -p .debs
  (cd .debs && apt-get download $(grep -v '^#' ../tools/gpu/debs.txt))
fi
root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
for f in .debs/*.deb; do dpkg -x "$f" "$root"; done
lib=$root/usr/lib/x86_64-linux-gnu
rm -f "$lib"/openblas-pthread/libopenblasp-*.a "$lib"/{libcrypto,libssl,libz,libutf8proc}.a "$lib"/libpcre2-*.a \
  "$lib"/libbrotli*.a
rm -rf "$root"/usr/share/{doc,man,lintian} "$root"/usr/src
tar -C "$root" -cJf .gpu-sysroot.tar.xz .
ls -l .gpu-sysroot.tar.xz
