#!/usr/bin/env bash
# Issue 14 on the GPU machine, one call: the eagle3_llama head fixture (PyTorch goldens) and its C++ golden
# test, the CUDA checks (tools/gpu/run_cuda_checks.sh test: op, golden, engine and CLI tests, EAGLE-3 on
# CUDA among them), `drift generate` on the default model with and without its head (batch 1 speed), and
# the Llama-3.1-8B-shaped EAGLE-3 costs (drift_bench_decode --eagle). Logs: $OUT/logs.tgz; the fixture:
# $OUT/fixtures.tar.gz. Carry [".debs"].
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/drift-gpu-out}
LOGS=$OUT/logs
mkdir -p "$LOGS"
t0=$SECONDS
DEADLINE=${DEADLINE:-560}

OUT=$LOGS bash tools/fixtures/run_on_device.sh --only eagle3_llama >"$LOGS/fixture.log" 2>&1
echo "fixture rc=$? after $((SECONDS - t0)) s"; tail -3 "$LOGS/fixture.log"
[ -f "$LOGS/fixtures.tar.gz" ] && mv "$LOGS/fixtures.tar.gz" "$OUT/fixtures.tar.gz"
[ -d /tmp/fixtures/models/eagle3_llama ] && cp -r /tmp/fixtures/models/eagle3_llama tests/fixtures/models/

OUT=$LOGS bash tools/gpu/run_cuda_checks.sh test >"$LOGS/cuda_checks.txt" 2>&1
echo "cuda checks after $((SECONDS - t0)) s"
sed -n '/== summary/,$p' "$LOGS/cuda_checks.txt"
grep -h "eagle3" "$LOGS/cuda_engine_test.log" | tail -3

ninja -C build-gpu -j16 models_test >"$LOGS/models_build.log" 2>&1
timeout 60 build-gpu/tests/models/models_test --gtest_filter='Eagle3*' >"$LOGS/eagle3_models_test.log" 2>&1
echo "models_test Eagle3* rc=$?: $(grep -E '^\[  (PASSED|FAILED)  \]' "$LOGS/eagle3_models_test.log" | head -4 | tr '\n' ' ')"

DRIFT=build-gpu/apps/drift/drift
for p in "The history of the" "To install the package, run" "A dictionary is"; do
  for mode in plain draft; do
    extra=""; [ $mode = draft ] && extra="--draft"
    timeout 60 "$DRIFT" generate --device cuda -p "$p" -n 256 --temperature 0 --ignore-eos $extra >/tmp/gen.out 2>/tmp/gen.err
    echo "generate [$mode] '$p': $(grep -E 'tokens/s|speculative' /tmp/gen.err | tr '\n' ' ') md5 $(md5sum </tmp/gen.out | cut -c1-8)"
  done
done | tee "$LOGS/generate_speed.txt"
tau=$(grep -oE '[0-9.]+ tokens per step' "$LOGS/generate_speed.txt" | awk '{s+=$1; n++} END {if (n) printf "%.2f", s/n; else print 3.5}')
echo "mean tokens per verify step: $tau"

left=$((DEADLINE - (SECONDS - t0)))
if [ $left -gt 60 ]; then
  timeout "$left" build-gpu/bench/decode/drift_bench_decode --model llama-3.1-8b --batch 1 --prefill 512 --forward-only 0 \
    --eager 0 --eagle 16 32 64 --eagle-tau "$tau" >"$LOGS/eagle_bench.log" 2>&1
  echo "bench rc=$? after $((SECONDS - t0)) s"
  sed -n '/EAGLE-3 on/,$p' "$LOGS/eagle_bench.log" | head -20
  grep -E "^\| llama" "$LOGS/eagle_bench.log" | head -4
else
  echo "no time left for the bench ($left s)"
fi
tar -C "$OUT" -czf "$OUT/logs.tgz" logs && rm -rf "$LOGS"
ls -l "$OUT"
