#!/usr/bin/env bash
# GPT-OSS's routed experts on the GPU machine, in one call (issue 12): builds the CUDA targets, runs the MoE
# op tests (every kernel choice against the CPU), the CUDA goldens and the GPT-OSS engine test, then the
# experts alone under each kernel choice (drift_bench_moe) and the model table of GPT-OSS-20B with
# forward-only graph rows under each choice (drift_bench_decode --moe-kernels).
#
# There:   bash tools/gpu/moe_checks.sh [all|test|bench]   (the run tool: carry [".gpu-sysroot.tar.xz"])
# Logs and the tables (moe_kernels.md, moe_models.md) go to $OUT; a short summary prints last. MODELS
# (default gpt-oss-20b) picks the model table's shapes; DEADLINE (default 570 s) bounds the model table.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/drift-gpu-out}
mkdir -p "$OUT"
MODE=${1:-all}
MODELS=${MODELS:-gpt-oss-20b}
DEADLINE=${DEADLINE:-570}
BUILD=build-gpu
t_start=$SECONDS
. tools/gpu/setup.sh
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv >"$OUT/build.log" 2>&1

configure_build . "$BUILD" -DDRIFT_TESTS=ON -DDRIFT_BENCH=ON || exit 1
ninja -C "$BUILD" -j16 -k 0 cuda_ops_test cuda_models_test cuda_engine_test drift_bench_moe drift_bench_decode \
  >>"$OUT/build.log" 2>&1
build_rc=$?
echo "build rc=$build_rc after $((SECONDS - t_start)) s"
[ $build_rc -ne 0 ] && grep -E "error|FAILED" "$OUT/build.log" | head -30

ops_rc=skip models_rc=skip engine_rc=skip
if [ "$MODE" != bench ]; then
  timeout 150 "$BUILD/tests/ops/cuda_ops_test" --gtest_filter='*Moe*:*Route*' >"$OUT/cuda_ops_test.log" 2>&1
  ops_rc=$?
  timeout 150 "$BUILD/tests/models/cuda_models_test" >"$OUT/cuda_models_test.log" 2>&1
  models_rc=$?
  timeout 120 "$BUILD/tests/ops/cuda_engine_test" --gtest_filter='*GptOss*' >"$OUT/cuda_engine_test.log" 2>&1
  engine_rc=$?
  echo "tests done after $((SECONDS - t_start)) s"
fi

kernel_rc=skip decode_rc=skip
if [ "$MODE" != test ]; then
  timeout 150 "$BUILD/bench/decode/drift_bench_moe" --model gpt-oss-20b gpt-oss-120b --markdown "$OUT/moe_kernels.md" \
    >"$OUT/moe_kernels.log" 2>&1
  kernel_rc=$?
  echo "kernel bench done after $((SECONDS - t_start)) s"
  left=$((DEADLINE - (SECONDS - t_start)))
  if [ $left -gt 60 ]; then
    # shellcheck disable=SC2086
    timeout "$left" "$BUILD/bench/decode/drift_bench_decode" $(printf -- "--model %s " $MODELS) \
      --batch 1 16 64 --prefill 512 --eager false --forward-only false --moe-kernels true \
      --markdown "$OUT/moe_models.md" >"$OUT/moe_models.log" 2>&1
    decode_rc=$?
  fi
fi

echo "== failures (first lines) =="
grep -hA6 "Failure$" "$OUT"/cuda_*.log 2>/dev/null | head -50
echo "== golden logit errors (MoE fixtures) =="
grep -h "max error" "$OUT/cuda_models_test.log" 2>/dev/null | grep -E "deepseek|gpt_oss" | head -12
echo "== routed experts alone =="
cat "$OUT/moe_kernels.md" 2>/dev/null || tail -5 "$OUT/moe_kernels.log" 2>/dev/null
echo "== model table =="
cat "$OUT/moe_models.md" 2>/dev/null || tail -12 "$OUT/moe_models.log" 2>/dev/null
echo "== summary ($((SECONDS - t_start)) s) =="
echo "build rc=$build_rc; bench moe rc=$kernel_rc; bench decode rc=$decode_rc"
for log in cuda_ops_test cuda_models_test cuda_engine_test; do
  echo "$log: $(grep -E '^\[  (PASSED|FAILED) ' "$OUT/$log.log" 2>/dev/null | head -8 | tr '\n' ' ')"
done
echo "rc: ops=$ops_rc models=$models_rc engine=$engine_rc"
