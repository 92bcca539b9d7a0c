#!/usr/bin/env bash
# Issue 14 on the GPU machine: verify steps' attention at long contexts, the split-KV decode kernel against
# the tensor-core prefill kernel (drift_bench_decode --split-kv-tokens 80 vs 0), Llama-3.1-8B shape at
# batch 1, trees of 16 and 64 nodes, contexts of CONTEXTS tokens (default 8192 32768). Builds the bench
# only. Logs: $OUT. Carry [".gpu-sysroot.tar.xz"].
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/drift-gpu-out}
mkdir -p "$OUT"
t0=$SECONDS
. tools/gpu/setup.sh
configure_build . build-gpu -DDRIFT_TESTS=OFF -DDRIFT_BENCH=ON || exit 1
ninja -C build-gpu -j16 drift_bench_decode >"$OUT/build.log" 2>&1 || { grep -E "error|FAILED" "$OUT/build.log" | head; exit 1; }
echo "built after $((SECONDS - t0)) s"
for prompt in ${CONTEXTS:-8192 32768}; do
  for split in 0 80; do
    timeout 150 build-gpu/bench/decode/drift_bench_decode --model llama-3.1-8b --batch 1 --prefill 512 --prompt "$prompt" \
      --gen 16 --forward-only 0 --eager 0 --split-kv-tokens $split --eagle 16 64 >"$OUT/ctx${prompt}_split$split.log" 2>&1
    echo "context $prompt, --split-kv-tokens $split: rc=$? after $((SECONDS - t0)) s"
    grep -E "^\| (target|draft)" "$OUT/ctx${prompt}_split$split.log"
  done
done
