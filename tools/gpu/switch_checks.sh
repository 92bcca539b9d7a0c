#!/usr/bin/env bash
# The streaming GEMV (CudaOptions::gemv_stream, ops/gemv_stream.cu) and the experts' prefill tiles on wgmma
# (CudaOptions::moe_wgmma, ops/moe_mma.cu), both on by default, against the kernels they replaced, in one call.
# First their tests (linear_test runs every case through both GEMVs, moe_test every expert case with wgmma on
# and off, against the CPU), then:
#   drift_bench_moe --batch 64 512 4096   GPT-OSS-20B's experts, prefill tiles on mma.sync and on wgmma
#   drift_bench_decode --ablate           batch-1 forward steps with each switch of the ablation (last row: the
#                                         streaming GEMV off)
#   drift_bench_decode --moe-wgmma        GPT-OSS-20B 64-way decode, prefill 512 and 4096 with each kernel
#   bash tools/gpu/switch_checks.sh [shape ...]   (the run tool: carry [".gpu-sysroot.tar.xz"]); logs in $OUT
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/drift-gpu-out}
mkdir -p "$OUT"
[ $# -eq 0 ] && set -- llama-3.2-1b llama-3.1-8b gpt-oss-20b
. tools/gpu/setup.sh
configure_build . build-gpu -DDRIFT_TESTS=ON -DDRIFT_BENCH=ON -DDRIFT_PYTHON=OFF || exit 1
ninja -C build-gpu -j16 cuda_ops_test drift_bench_decode drift_bench_moe > "$OUT/build.log" 2>&1 ||
  { grep -E "error" "$OUT/build.log" | head; exit 1; }
# Two processes: a fault in one switch's kernels (a bad wgmma descriptor, say) must not hide the other's result.
for suite in 'Linear*' '*Moe*'; do
  timeout 240 build-gpu/tests/ops/cuda_ops_test --gtest_filter="$suite" > "$OUT/ops_${suite//\*/}.log" 2>&1
  echo "$suite rc=$?"; grep -E "^\[  (PASSED|FAILED) |Failure|wgmma|streaming" "$OUT/ops_${suite//\*/}.log" | head -8
done
timeout 120 build-gpu/bench/decode/drift_bench_moe --batch 64 512 4096 > "$OUT/moe.log" 2>&1
echo "drift_bench_moe rc=$?"; grep -E "^\| gpt" "$OUT/moe.log"
for shape in "$@"; do
  timeout 150 build-gpu/bench/decode/drift_bench_decode --model "$shape" --batch 1 --prefill 16 --ablate true \
    --markdown "$OUT/ablate_$shape.md" > "$OUT/ablate_$shape.log" 2>&1
  echo "$shape rc=$?"; grep -E "forward, graph" "$OUT/ablate_$shape.md" | head -8
done
for wgmma in false true; do
  timeout 150 build-gpu/bench/decode/drift_bench_decode --model gpt-oss-20b --batch 64 --prefill 512 4096 --moe-wgmma $wgmma \
    --eager false --forward-only false --markdown "$OUT/prefill_$wgmma.md" > "$OUT/prefill_$wgmma.log" 2>&1
  echo "gpt-oss-20b, wgmma $wgmma rc=$?"; grep -E "prefill|b=64" "$OUT/prefill_$wgmma.md"
done
