#!/usr/bin/env bash
# Decode and prefill beside llama.cpp on the same GPU: the issues' tables ask for the peer measured in the
# same run, and the GPU lent is not always the H100 the recorded llama.cpp figures came from.
#   Here, once: fetch unslothai/llama.cpp, ../shared/anchor/make_peer_src.sh GIT_DIR (writes
#               .peer-src/llama.cpp.tgz), cp -r ../shared/anchor .peer-src/anchor
#   There:      tools/gpu/peer_decode.sh peer NAME...   llama.cpp on the anchor's shapes (llama1b, llama8b,
#                                                        gptoss20b, dsv2lite: make_models.py's names)
#               tools/gpu/peer_decode.sh drift NAME...  drift_bench_decode on the same shapes
#               (carry [".gpu-sysroot.tar.xz", ".peer-src"]). One call per mode and shape or two fits the
#               10-minute limit (llama.cpp's build takes ~3 of them); a warm machine keeps .peer-build/ and
#               build-gpu/ between calls. Tables in $OUT/peer.md and $OUT/drift.md.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/drift-gpu-out}
mkdir -p "$OUT"
MODE=${1:-}
shift || true
[ $# -gt 0 ] || { echo "usage: peer_decode.sh peer|drift NAME..."; exit 2; }
ANCHOR=.peer-src/anchor
t0=$SECONDS

drift_name() {  # the anchor's shape name -> drift_bench_decode's
  case $1 in
    llama1b) echo llama-3.2-1b ;; llama8b) echo llama-3.1-8b ;; gptoss20b) echo gpt-oss-20b ;;
    dsv2lite) echo deepseek-v2-lite ;; *) echo "unknown shape $1" >&2; return 1 ;;
  esac
}

case $MODE in
  peer)
    [ -f .peer-src/llama.cpp.tgz ] && [ -d "$ANCHOR" ] || { echo "no .peer-src (see the header)"; exit 1; }
    for name in "$@"; do
      echo "== llama.cpp $name (at $((SECONDS - t0)) s)"
      if [ "$name" = gptoss20b ]; then
        bash "$ANCHOR/run_gptoss20b.sh"
      elif [ "$name" = dsv2lite ]; then
        OUTTYPE=q8_0 bash "$ANCHOR/run_llamacpp.sh" "$name"
      else
        bash "$ANCHOR/run_llamacpp.sh" "$name"
      fi
    done 2>&1 | tee -a "$OUT/peer.md"
    ;;
  drift)
    . tools/gpu/setup.sh
    configure_build . build-gpu -DDRIFT_TESTS=OFF -DDRIFT_BENCH=ON -DDRIFT_PYTHON=OFF || exit 1
    ninja -C build-gpu -j16 drift_bench_decode >"$OUT/build.log" 2>&1 || { grep error "$OUT/build.log" | head; exit 1; }
    models=()
    for name in "$@"; do models+=("$(drift_name "$name")") || exit 2; done
    timeout 540 build-gpu/bench/decode/drift_bench_decode --model "${models[@]}" --batch 1 16 64 --prefill 512 4096 \
      --eager false --forward-only false --markdown "$OUT/drift.md" >"$OUT/drift.log" 2>&1
    cat "$OUT/drift.md" 2>/dev/null || tail -20 "$OUT/drift.log"
    ;;
  *) echo "usage: peer_decode.sh peer|drift NAME..."; exit 2 ;;
esac
echo "done at $((SECONDS - t0)) s"
