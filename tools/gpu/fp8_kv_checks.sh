#!/usr/bin/env bash
# Issue 17 point 4 (FP8 KV cache) on the GPU machine, in one call: the FP8 op tests (CUDA write = the CPU's
# codes and scales, fused rope+write = rope then write, decode and prefill attention over FP8 caches against
# the CPU, the FP8 decode kernel on tensor cores and on CUDA cores) with the bf16 attention and rope/write
# tests beside them, the CUDA goldens (CudaFp8GoldenTest included), the FP8 engine test (graphs = eager,
# greedy against the CPU's FP8 run), `drift perplexity` of models/default on CUDA with bf16 and fp8 KV;
# then decode attention alone over bf16 and FP8 caches (drift_bench_kv_attention, 8B shape; drift_bench_mla,
# DeepSeek's 576-wide latent with 16 heads, bf16 and FP8); then the 8B
# decode table at a 4k prompt with bf16 and with fp8 KV (64 sequences; each run prints how many 4k
# sequences fit the pool).
#
# Here, once:   mkdir -p .debs && (cd .debs && apt-get download $(grep -v "^#" ../tools/gpu/debs.txt))
# There:        bash tools/gpu/fp8_kv_checks.sh [all|test|kernel|bench|test,kernel|...]   (the run tool: carry [".debs"])
# Logs and the tables (kv_attention.md, decode_bf16.md, decode_fp8.md) go to $OUT; a short summary prints last.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/drift-gpu-out}
mkdir -p "$OUT"
MODE=${1:-all}
BUILD=build-gpu
t_start=$SECONDS
. tools/gpu/setup.sh
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv >"$OUT/build.log" 2>&1
configure_build . "$BUILD" -DDRIFT_TESTS=ON -DDRIFT_BENCH=ON || exit 1
ninja -C "$BUILD" -j16 -k 0 cuda_ops_test cuda_models_test cuda_engine_test drift drift_bench_decode \
  drift_bench_kv_attention drift_bench_mla >>"$OUT/build.log" 2>&1
build_rc=$?
echo "build rc=$build_rc after $((SECONDS - t_start)) s"
[ $build_rc -ne 0 ] && grep -E "error|FAILED" "$OUT/build.log" | head -30

wants() { [ "$MODE" = all ] || [[ ",$MODE," == *",$1,"* ]]; }

ops_rc=skip models_rc=skip engine_rc=skip
if wants test; then
  timeout 150 "$BUILD/tests/ops/cuda_ops_test" \
    --gtest_filter='*Fp8*:*Attention*:*WriteKv*:*RopeAndWriteKv*:*Mla*' >"$OUT/cuda_ops_test.log" 2>&1
  ops_rc=$?
  timeout 150 "$BUILD/tests/models/cuda_models_test" >"$OUT/cuda_models_test.log" 2>&1
  models_rc=$?
  timeout 120 "$BUILD/tests/ops/cuda_engine_test" --gtest_filter='*Fp8*:CudaEngine.GreedyMatchesCpuAndGraphsMatchEager' \
    >"$OUT/cuda_engine_test.log" 2>&1
  engine_rc=$?
  for kv in bf16 fp8; do
    timeout 60 "$BUILD/apps/drift/drift" perplexity -m models/default -f tests/fixtures/text/kv_quality.txt \
      --context 256 --stride 128 --device cuda --kv-cache-dtype "$kv" >"$OUT/perplexity_$kv.txt" 2>&1
  done
  echo "tests done after $((SECONDS - t_start)) s"
fi

kernel_rc=skip
if wants kernel; then
  timeout 120 "$BUILD/bench/decode/drift_bench_kv_attention" --markdown "$OUT/kv_attention.md" >"$OUT/kv_attention.log" 2>&1
  kernel_rc=$?
  for latent in false true; do
    timeout 120 "$BUILD/bench/decode/drift_bench_mla" --heads 16 --batch 1 64 --context 4096 32768 --fp8 "$latent" \
      --markdown "$OUT/mla_fp8_$latent.md" >"$OUT/mla_fp8_$latent.log" 2>&1 || kernel_rc=$?
  done
fi

bf16_rc=skip fp8_rc=skip
if wants bench; then
  for kv in bf16 fp8; do
    left=$(( (${BENCH_DEADLINE:-570} - (SECONDS - t_start)) / 2 ))
    [ "$kv" = fp8 ] && left=$((${BENCH_DEADLINE:-570} - (SECONDS - t_start)))
    timeout "$left" "$BUILD/bench/decode/drift_bench_decode" --model llama-3.1-8b --batch 64 --prompt 4096 --gen 64 \
      --prefill 4096 --eager false --forward-only false --kv-cache-dtype "$kv" --markdown "$OUT/decode_$kv.md" \
      >"$OUT/decode_$kv.log" 2>&1
    eval "${kv}_rc=$?"
  done
fi

echo "== failures (first lines) =="
grep -hA6 "Failure$" "$OUT"/cuda_*.log 2>/dev/null | head -50
echo "== FP8 golden errors =="
grep -h "cuda fp8" "$OUT/cuda_models_test.log" 2>/dev/null | head -20
echo "== perplexity (models/default, CUDA) =="
for kv in bf16 fp8; do echo "$kv: $(tail -3 "$OUT/perplexity_$kv.txt" 2>/dev/null | tr '\n' ' ')"; done
echo "== decode attention alone (8B shape) =="
grep -hE "^\||relative L2" "$OUT/kv_attention.md" 2>/dev/null || tail -5 "$OUT/kv_attention.log" 2>/dev/null
echo "== MLA decode attention alone (16 heads, 576-wide latent): bf16, then fp8 =="
for latent in false true; do grep -hE "^\|" "$OUT/mla_fp8_$latent.md" 2>/dev/null || tail -3 "$OUT/mla_fp8_$latent.log" 2>/dev/null; done
echo "== decode, llama-3.1-8b, 64 sequences, 4k prompt =="
for kv in bf16 fp8; do
  grep -h "KV cache" "$OUT/decode_$kv.log" 2>/dev/null
  grep -hE "^\| llama" "$OUT/decode_$kv.md" 2>/dev/null || tail -5 "$OUT/decode_$kv.log" 2>/dev/null
done
echo "== summary ($((SECONDS - t_start)) s) =="
echo "build rc=$build_rc; kernel rc=$kernel_rc; decode bf16 rc=$bf16_rc; decode fp8 rc=$fp8_rc; ops rc=$ops_rc; models rc=$models_rc; engine rc=$engine_rc"
for log in cuda_ops_test cuda_models_test cuda_engine_test; do
  echo "$log: $(grep -E '^\[  (PASSED|FAILED) ' "$OUT/$log.log" 2>/dev/null | head -8 | tr '\n' ' ')"
done
