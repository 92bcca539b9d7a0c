#!/usr/bin/env bash
# A backend switch measured in one call: its op tests against the CPU, then whole steps with it off and on.
# Now, off until measured: CudaOptions::moe_one_token_stream (batch-1 routed experts on resident CTAs) and
# moe_wgmma_wide (the experts' wgmma prefill tiles 128 pairs wide), both in ops/moe_mma.cu. Earlier: gemv_stream and moe_wgmma (bench/RESULTS.md 2026-11-29, both made defaults), and
# decode_head_slices (left off: faster alone, slower in whole steps).
#   *Moe*, *Linear*, *Attention* of cuda_ops_test   moe_test runs every expert case with the switch on and off
#   drift_bench_moe --batch 1 64 512 4096           GPT-OSS-20B's experts alone; batch 1: "one token" against
#                                                   "one token, streamed"; 512 and 4096: "grouped, wgmma" against
#                                                   "grouped, wgmma 128 pairs"
#   drift_bench_decode $STEPS --FLAG false/true     whole steps through the runner, per shape
#   bash tools/gpu/switch_checks.sh [shape ...]   (the run tool: carry [".gpu-sysroot.tar.xz"]); logs in $OUT
# FLAG (default moe-one-token-stream) names the drift_bench_decode option of the switch; STEPS (default
# "--batch 1 --prefill 16") the steps timed (FLAG=moe-wgmma-wide STEPS="--batch 64 --prefill 512 4096").
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/drift-gpu-out}
mkdir -p "$OUT"
FLAG=${FLAG:-moe-one-token-stream}
STEPS=${STEPS:---batch 1 --prefill 16}
[ $# -eq 0 ] && set -- gpt-oss-20b
. tools/gpu/setup.sh
configure_build . build-gpu -DDRIFT_TESTS=ON -DDRIFT_BENCH=ON -DDRIFT_PYTHON=OFF || exit 1
ninja -C build-gpu -j16 cuda_ops_test drift_bench_decode drift_bench_moe > "$OUT/build.log" 2>&1 ||
  { grep -E "error" "$OUT/build.log" | head; exit 1; }
# One process per suite: a fault in one kernel family must not hide the others' results.
for suite in '*Moe*' '*Linear*' '*Attention*'; do
  timeout 240 build-gpu/tests/ops/cuda_ops_test --gtest_filter="$suite" > "$OUT/ops_${suite//\*/}.log" 2>&1
  echo "$suite rc=$?"; grep -E "^\[  (PASSED|FAILED) |Failure" "$OUT/ops_${suite//\*/}.log" | head -8
done
timeout 120 build-gpu/bench/decode/drift_bench_moe --batch 1 64 512 4096 > "$OUT/moe.log" 2>&1
echo "drift_bench_moe rc=$?"; grep -E "^\| gpt" "$OUT/moe.log"
for shape in "$@"; do
  for on in false true; do
    # shellcheck disable=SC2086
    timeout 150 build-gpu/bench/decode/drift_bench_decode --model "$shape" $STEPS --eager false \
      --forward-only false "--$FLAG" $on --markdown "$OUT/${shape}_$on.md" > "$OUT/${shape}_$on.log" 2>&1
    echo "$shape, $FLAG $on rc=$?:"; grep -E "prefill|decode b=" "$OUT/${shape}_$on.md"
  done
done
