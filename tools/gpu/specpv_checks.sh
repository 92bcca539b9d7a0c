#!/usr/bin/env bash
# Issue 15 on the GPU machine: SpecPV's bounds and score kernels against the CPU (cuda_ops_test
# *BlockBounds*), the engine with partial views on the GPU and EAGLE-3 beside it (cuda_engine_test
# *SpecPv*:*Eagle3*), then verify steps of a 64-token tree at the Llama-3.1-8B shape, batch 1, at contexts
# CONTEXTS (default 8192 32768 131072): full, through SpecPV's default view, and full with the scoring a
# refresh adds. Logs: $OUT. Carry [".gpu-sysroot.tar.xz"].
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/drift-gpu-out}
mkdir -p "$OUT"
t_start=$SECONDS
. tools/gpu/setup.sh
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader | tee "$OUT/gpu.txt"
configure_build . build-gpu -DDRIFT_TESTS=ON -DDRIFT_BENCH=ON -DDRIFT_PYTHON=OFF || exit 1
ninja -C build-gpu -j16 -k 0 cuda_ops_test cuda_engine_test drift_bench_decode >"$OUT/build.log" 2>&1 ||
  { grep -E "error|FAILED" "$OUT/build.log" | head -20; }
echo "built after $((SECONDS - t_start)) s"
timeout 120 build-gpu/tests/ops/cuda_ops_test --gtest_filter='*BlockBounds*' >"$OUT/ops.log" 2>&1
echo "cuda_ops_test *BlockBounds*: $(summary "$OUT/ops.log")"
timeout 200 build-gpu/tests/ops/cuda_engine_test --gtest_filter='*SpecPv*:*Eagle3*' >"$OUT/engine.log" 2>&1
echo "cuda_engine_test *SpecPv*:*Eagle3*: $(summary "$OUT/engine.log")"
grep -E "^\[ specpv" "$OUT/engine.log"
for prompt in ${CONTEXTS:-8192 32768 131072}; do
  left=$((${DEADLINE:-560} - (SECONDS - t_start)))
  [ "$left" -lt 40 ] && { echo "context $prompt: no time left"; continue; }
  timeout "$left" build-gpu/bench/decode/drift_bench_decode --model llama-3.1-8b --batch 1 --prefill 512 \
    --prompt "$prompt" --gen 8 --forward-only 0 --eager 0 --eagle 64 >"$OUT/ctx$prompt.log" 2>&1
  echo "context $prompt: rc=$? after $((SECONDS - t_start)) s"
  grep -E "^\| (target|SpecPV|full verify)" "$OUT/ctx$prompt.log"
done
