#!/usr/bin/env bash
# Issue 14 on the GPU machine, one call: with FIXTURE=1 the eagle3_llama head fixture (PyTorch goldens)
# first; the CUDA checks (tools/gpu/run_cuda_checks.sh test: op, golden, engine and CLI tests, EAGLE-3 on
# CUDA among them) and models_test's EAGLE-3 and retrofit cases on the GPU, `drift generate` on the
# default model with and without its head (batch 1 speed), and the Llama-3.1-8B-shaped EAGLE-3 costs
# (drift_bench_decode --eagle). Logs: $OUT/logs.tgz; the fixture: $OUT/fixtures.tar.gz. Carry
# [".gpu-sysroot.tar.xz"].
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/drift-gpu-out}
LOGS=$OUT/logs
mkdir -p "$LOGS"
t0=$SECONDS
DEADLINE=${DEADLINE:-560}

if [ "${FIXTURE:-0}" = 1 ]; then
  OUT=$LOGS bash tools/fixtures/run_on_device.sh --only eagle3_llama >"$LOGS/fixture.log" 2>&1
  echo "fixture rc=$? after $((SECONDS - t0)) s"; tail -3 "$LOGS/fixture.log"
  [ -f "$LOGS/fixtures.tar.gz" ] && mv "$LOGS/fixtures.tar.gz" "$OUT/fixtures.tar.gz"
  [ -d /tmp/fixtures/models/eagle3_llama ] && cp -r /tmp/fixtures/models/eagle3_llama tests/fixtures/models/
fi

OUT=$LOGS bash tools/gpu/run_cuda_checks.sh test >"$LOGS/cuda_checks.txt" 2>&1
echo "cuda checks after $((SECONDS - t0)) s"
sed -n '/== summary/,$p' "$LOGS/cuda_checks.txt"
grep -h "eagle3" "$LOGS/cuda_engine_test.log" | tail -3

timeout 90 build-gpu/tests/models/models_test --gtest_filter='Eagle3*:Retrofit*' >"$LOGS/models_test.log" 2>&1
echo "models_test Eagle3*:Retrofit* rc=$?: $(grep -E '^\[  (PASSED|FAILED)  \]' "$LOGS/models_test.log" | head -6 | tr '\n' ' ')"

# Batch-1 speed of the default model: plain, with its head at trees of 16/32/64 nodes, and the 32-node
# tree without CUDA graphs; tau (tokens per verify step, bonus included) per tree size over the prompts.
DRIFT=build-gpu/apps/drift/drift
for p in "The history of the" "To install the package, run" "A dictionary is"; do
  for mode in plain 16 32 64 32-eager; do
    extra=""
    case $mode in
      plain) ;;
      32-eager) extra="--draft --spec-tokens 32 --enforce-eager" ;;
      *) extra="--draft --spec-tokens $mode" ;;
    esac
    timeout 60 "$DRIFT" generate --device cuda -p "$p" -n 256 --temperature 0 --ignore-eos $extra >/tmp/gen.out 2>/tmp/gen.err
    echo "generate [$mode] '$p': $(grep -E 'tokens/s|speculative' /tmp/gen.err | tr '\n' ' ') md5 $(md5sum </tmp/gen.out | cut -c1-8)"
  done
done | tee "$LOGS/generate_speed.txt"
taus=""
for t in 16 32 64; do
  taus="$taus $(grep -F "[$t]" "$LOGS/generate_speed.txt" | grep -oE '[0-9.]+ tokens per step' |
    awk '{s+=$1; n++} END {if (n) printf "%.2f", s/n; else print 3.5}')"
done
echo "mean tokens per verify step, trees of 16 32 64:$taus"

# The 8B shape's EAGLE-3 costs and decode batches, with BENCH_FLAGS_A, then BENCH_FLAGS_B (an A/B of
# CudaOptions in one call; each process builds its own graphs).
for variant in A B; do
  flags_var=BENCH_FLAGS_$variant
  flags=${!flags_var-}
  [ $variant = B ] && [ -z "${BENCH_FLAGS_B+x}" ] && break
  left=$((DEADLINE - (SECONDS - t0)))
  if [ $left -lt 90 ]; then echo "no time left for the bench ($left s)"; break; fi
  timeout "$left" build-gpu/bench/decode/drift_bench_decode --model llama-3.1-8b --batch 1 16 64 --prefill 512 \
    --forward-only 0 --eager 0 $flags --eagle 16 32 64 --eagle-tau $taus >"$LOGS/eagle_bench_$variant.log" 2>&1
  echo "bench $variant ($flags) rc=$? after $((SECONDS - t0)) s"
  sed -n '/EAGLE-3 on/,$p' "$LOGS/eagle_bench_$variant.log" | grep -E "^\|" | head -16
  grep -E "^\| llama" "$LOGS/eagle_bench_$variant.log" | tail -4
done
tar -C "$OUT" -czf "$OUT/logs.tgz" logs && rm -rf "$LOGS"
ls -l "$OUT"
