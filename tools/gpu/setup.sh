# Sourced by the GPU-machine scripts: unpacks the Debian build dependencies carried in .debs/ (or their
# trimmed archive .gpu-sysroot.tar.xz, tools/gpu/pack_sysroot.sh) into a
# sysroot (never into /, which could shadow the image's own libraries), points pkg-config and the loader
# at it, and defines configure_build SRC BUILD [cmake args...] for a CUDA (sm_90a) Release build.
SYSROOT=/tmp/drift-sysroot
LIBDIR=$SYSROOT/usr/lib/x86_64-linux-gnu
if [ ! -d "$SYSROOT" ]; then
  if [ -f .gpu-sysroot.tar.xz ]; then  # tools/gpu/pack_sysroot.sh: the same packages, trimmed
    mkdir -p "$SYSROOT" && tar -C "$SYSROOT" -xJf .gpu-sysroot.tar.xz || { echo "cannot unpack .gpu-sysroot.tar.xz"; exit 1; }
  else
    for f in .debs/*.deb; do dpkg -x "$f" "$SYSROOT" || { echo "cannot unpack $f"; exit 1; }; done
  fi
fi
export LD_LIBRARY_PATH=$LIBDIR:$LIBDIR/openblas-pthread${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export PKG_CONFIG_SYSROOT_DIR=$SYSROOT
export PKG_CONFIG_LIBDIR=$LIBDIR/pkgconfig:$LIBDIR/openblas-pthread/pkgconfig:$SYSROOT/usr/share/pkgconfig
PKGCONF=$(command -v pkg-config || echo "$SYSROOT/usr/bin/pkgconf")
NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)

# cpp-httplib (the server, hence the drift binary) when its packages came along; otherwise a stand-in
# target lets the project configure and only the drift binary is left out.
configure_build() {
  local src=$1 build=$2
  shift 2
  [ -f "$build/build.ninja" ] && return 0
  local stub=()
  "$PKGCONF" --exists cpp-httplib || stub=(-DCMAKE_PROJECT_INCLUDE="$PWD/tools/gpu/stub_httplib.cmake")
  cmake -S "$src" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a \
    -DCMAKE_CUDA_COMPILER="$NVCC" -DDRIFT_CUDA=ON -DCMAKE_PREFIX_PATH="$SYSROOT/usr" \
    -DPKG_CONFIG_EXECUTABLE="$PKGCONF" "${stub[@]}" "$@" >/tmp/drift-configure.log 2>&1 ||
    { echo "configure of $src failed:"; tail -40 /tmp/drift-configure.log; return 1; }
}

# A gtest log in one line: "passed N, skipped S; failed: names" ("not run" without the log).
summary() {  # log -> "passed N, skipped S; failed: names"
  local log=$1
  [ -f "$log" ] || { echo "not run"; return; }
  local passed failed skipped
  passed=$(grep -oE '^\[  PASSED  \] [0-9]+' "$log" | grep -oE '[0-9]+$')
  skipped=$(grep -oE '^\[  SKIPPED \] [0-9]+' "$log" | grep -oE '[0-9]+$')
  failed=$(grep -E '^\[  FAILED  \] ' "$log" | grep -v 'listed below' | sed 's/^\[  FAILED  \] //; s/,.*//' | sort -u | tr '\n' ' ')
  echo "passed ${passed:-0}, skipped ${skipped:-0}; failed: ${failed:-none}"
}

# Time and tables for the scripts with a deadline (TP_DEADLINE seconds after t_start, both set by the caller).
left() {  # seconds left before the deadline, at least $1
  local l=$((TP_DEADLINE - (SECONDS - t_start)))
  [ "$l" -lt "$1" ] && l=$1
  echo "$l"
}
tok_s() {  # markdown table of drift_bench_decode, workload -> tok/s
  [ -f "$1" ] || { echo "-"; return; }
  awk -F'|' -v w="$2" '{ gsub(/^ +| +$/, "", $3) } $3 == w { gsub(/ /, "", $4); print $4; exit }' "$1"
}
ratio() { python3 -c "import sys; a, b = sys.argv[1:]; print(f'{float(b) / float(a):.2f}x')" "$1" "$2" 2>/dev/null || echo "-"; }
