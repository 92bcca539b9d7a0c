#!/usr/bin/env bash
# Issue 13's checks on the GPU machine, in one call: remakes the MoE fixtures (their goldens carry per-token
# router margins) while the CUDA targets build, then runs the MLA and MoE op tests (both MLA kernels), the
# CUDA goldens, the MLA engine test on models/drift-mla-14m, `drift perplexity` of that model on the CPU and
# on CUDA, the MLA kernel table (drift_bench_mla) and the model table (drift_bench_decode on the
# DeepSeek-V2-Lite and Youtu-LLM-2B shapes). The call's tree may leave out models/drift-chat-15m (the 64 MiB
# limit); nothing here needs it.
#
# Here, once:   mkdir -p .debs && (cd .debs && apt-get download $(grep -v "^#" ../tools/gpu/debs.txt))
# There:        bash tools/gpu/mla_checks.sh [all|test|bench]   (the run tool: carry [".debs"])
# Logs, the new fixtures (fixtures.tar.gz) and the tables (mla_kernel.md, mla_models.md) go to $OUT; a short
# summary prints last. MODELS (default "deepseek-v2-lite youtu-llm-2b") picks the model table's shapes;
# FIXTURES=0 skips remaking the fixtures.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/drift-gpu-out}
mkdir -p "$OUT"
MODE=${1:-all}
MODELS=${MODELS:-deepseek-v2-lite youtu-llm-2b}
BUILD=build-gpu
t_start=$SECONDS
. tools/gpu/setup.sh
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv >"$OUT/build.log" 2>&1

fixtures_pid=
if [ "$MODE" != bench ] && [ "${FIXTURES:-1}" != 0 ]; then
  PYTHONUNBUFFERED=1 python3 tools/fixtures/make_fixtures.py --out /tmp/fixtures --only deepseek_v2 deepseek_v3 gpt_oss \
    >"$OUT/fixtures.log" 2>&1 &
  fixtures_pid=$!
fi

configure_build . "$BUILD" -DDRIFT_TESTS=ON -DDRIFT_BENCH=ON || exit 1
ninja -C "$BUILD" -j16 -k 0 cuda_ops_test cuda_models_test cuda_engine_test drift drift_bench_mla drift_bench_decode \
  >>"$OUT/build.log" 2>&1
build_rc=$?
echo "build rc=$build_rc after $((SECONDS - t_start)) s"
[ $build_rc -ne 0 ] && grep -E "error|FAILED" "$OUT/build.log" | head -30

fixtures_rc=skip
if [ -n "$fixtures_pid" ]; then
  wait "$fixtures_pid"
  fixtures_rc=$?
  if [ "$fixtures_rc" -eq 0 ]; then
    tar -C /tmp -czf "$OUT/fixtures.tar.gz" fixtures
    cp -r /tmp/fixtures/models/. tests/fixtures/models/
  fi
  echo "fixtures rc=$fixtures_rc after $((SECONDS - t_start)) s"
fi

ops_rc=skip models_rc=skip engine_rc=skip
if [ "$MODE" != bench ]; then
  timeout 150 "$BUILD/tests/ops/cuda_ops_test" --gtest_filter='*Mla*:*Moe*:*Route*' >"$OUT/cuda_ops_test.log" 2>&1
  ops_rc=$?
  timeout 150 "$BUILD/tests/models/cuda_models_test" >"$OUT/cuda_models_test.log" 2>&1
  models_rc=$?
  timeout 120 "$BUILD/tests/ops/cuda_engine_test" --gtest_filter='*Mla*:*GptOss*' >"$OUT/cuda_engine_mla.log" 2>&1
  engine_rc=$?
  for dev in cpu cuda; do
    timeout 120 "$BUILD/apps/drift/drift" perplexity -m models/drift-mla-14m -f README.md --context 512 --device "$dev" \
      >"$OUT/perplexity_$dev.txt" 2>&1
    echo "perplexity $dev rc=$?" >>"$OUT/perplexity_$dev.txt"
  done
  echo "tests done after $((SECONDS - t_start)) s"
fi

kernel_rc=skip decode_rc=skip
if [ "$MODE" != test ]; then
  timeout 150 "$BUILD/bench/decode/drift_bench_mla" --markdown "$OUT/mla_kernel.md" >"$OUT/mla_kernel.log" 2>&1
  kernel_rc=$?
  echo "kernel bench done after $((SECONDS - t_start)) s"
  left=$((570 - (SECONDS - t_start)))
  # shellcheck disable=SC2086
  [ $left -gt 60 ] && timeout "$left" "$BUILD/bench/decode/drift_bench_decode" $(printf -- "--model %s " $MODELS) \
    --batch 1 16 64 --prefill 512 4096 --eager false --forward-only false --markdown "$OUT/mla_models.md" \
    >"$OUT/mla_models.log" 2>&1
  decode_rc=$?
fi

echo "== failures (first lines) =="
grep -hA6 "Failure$" "$OUT"/cuda_*.log 2>/dev/null | head -50
echo "== golden logit errors (MLA and MoE fixtures) =="
grep -h "max error" "$OUT/cuda_models_test.log" 2>/dev/null | grep -E "deepseek|gpt_oss|youtu" | head -20
grep -h "^\[ engine   \]" "$OUT/cuda_engine_mla.log" 2>/dev/null | head -8
echo "== MLA kernel table =="
cat "$OUT/mla_kernel.md" 2>/dev/null || tail -5 "$OUT/mla_kernel.log" 2>/dev/null
echo "== model table =="
cat "$OUT/mla_models.md" 2>/dev/null || tail -8 "$OUT/mla_models.log" 2>/dev/null
echo "== summary ($((SECONDS - t_start)) s) =="
echo "fixtures rc=$fixtures_rc; build rc=$build_rc; bench mla rc=$kernel_rc; bench decode rc=$decode_rc"
for log in cuda_ops_test cuda_models_test cuda_engine_mla; do
  echo "$log: $(grep -E '^\[  (PASSED|FAILED) ' "$OUT/$log.log" 2>/dev/null | head -8 | tr '\n' ' ')"
done
echo "rc: ops=$ops_rc models=$models_rc engine=$engine_rc"
for dev in cpu cuda; do echo "perplexity $dev: $(tail -4 "$OUT/perplexity_$dev.txt" 2>/dev/null | tr '\n' ' ')"; done
