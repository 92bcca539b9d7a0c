#!/usr/bin/env bash
# Tensor parallelism over four GPUs (issue 18): build the bench (sysroot from the carried .debs, sm_90a,
# NCCL from the CUDA toolkit), then the Llama-3.1-70B shape (random bf16 weights, each rank drawing only its
# part) at TP=4: prefill 512, decode batch 1 and 64 from CUDA graphs, beside the byte limit of the four GPUs
# and the all-reduce time per step; then the Llama-3.1-8B shape at TP=1 and TP=4 when time is left. Prints a
# short table last; logs go to $OUT. Every step has a timeout within TP_DEADLINE seconds.
#
# There:   tools/gpu/tp4_checks.sh   (the run tool: kind nvidia-h200-x4 or nvidia-h100-x4, carry
#          [".gpu-sysroot.tar.xz"]; delete models/drift-mla-14m here first for the 64 MiB tree limit, and
#          restore it after)
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/drift-gpu-out}
mkdir -p "$OUT"
BUILD=build-gpu
TP_DEADLINE=${TP_DEADLINE:-540}
t_start=$SECONDS
export NCCL_NVLS_ENABLE=0  # NVLink multicast stays off on these machines
export NCCL_DEBUG=${NCCL_DEBUG:-WARN}
. tools/gpu/setup.sh


gpus=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | wc -l)
{
  nvidia-smi --query-gpu=index,name,memory.total --format=csv
  nvidia-smi topo -m 2>&1 | head -8
  echo "GPUs: $gpus; NCCL_NVLS_ENABLE=$NCCL_NVLS_ENABLE; cores: $(nproc)"
} 2>&1 | tee "$OUT/tp4_build.log"

configure_build . "$BUILD" -DDRIFT_TESTS=OFF -DDRIFT_BENCH=ON || exit 1
timeout "$(left 60)" ninja -C "$BUILD" -j"$(nproc)" drift_bench_decode >>"$OUT/tp4_build.log" 2>&1
build_rc=$?
echo "build rc=$build_rc after $((SECONDS - t_start)) s"
[ $build_rc -ne 0 ] && grep -E "error|FAILED" "$OUT/tp4_build.log" | head -30

BENCH=$BUILD/bench/decode/drift_bench_decode
COMMON=(--batch 1 64 --prefill 512 --prompt 256 --gen 32 --forward-only 0 --eager 0 --loader random)
rc70=skip rc8_1=skip rc8_4=skip
if [ -x "$BENCH" ] && [ "$gpus" -ge 4 ]; then
  timeout "$(left 60)" "$BENCH" --model llama-3.1-70b "${COMMON[@]}" --tensor-parallel 4 --markdown "$OUT/bench_70b_tp4.md" \
    >"$OUT/bench_70b_tp4.log" 2>&1
  rc70=$?
  echo "70B done after $((SECONDS - t_start)) s"
  if [ "$(left 0)" -ge 150 ]; then
    timeout $(($(left 40) / 2)) "$BENCH" --model llama-3.1-8b "${COMMON[@]}" --markdown "$OUT/bench_8b_tp1.md" \
      >"$OUT/bench_8b_tp1.log" 2>&1
    rc8_1=$?
    timeout "$(left 30)" "$BENCH" --model llama-3.1-8b "${COMMON[@]}" --tensor-parallel 4 --markdown "$OUT/bench_8b_tp4.md" \
      >"$OUT/bench_8b_tp4.log" 2>&1
    rc8_4=$?
  fi
fi


echo
echo "== errors (first lines) =="
grep -hE "check failed|CUDA error|NCCL (WARN|error)|illegal|what\(\)" "$OUT"/bench_*.log 2>/dev/null | head -8
echo "== 70B at TP=4 =="
grep -hE "parameters|KV pool|^all-reduce on" -A0 "$OUT/bench_70b_tp4.log" 2>/dev/null | head -6
grep -A6 "^all-reduce on" "$OUT/bench_70b_tp4.log" 2>/dev/null
cat "$OUT/bench_70b_tp4.md" 2>/dev/null
echo
echo "== summary ($((SECONDS - t_start)) s) =="
echo "build: rc=$build_rc; GPUs: $gpus; bench rc: 70b tp4=$rc70, 8b tp1=$rc8_1, 8b tp4=$rc8_4"
echo "| Llama-3.1-8B shape | TP=1 tok/s | TP=4 tok/s | TP=4 / TP=1 |"
echo "|---|---:|---:|---:|"
for w in "prefill 512" "decode b=1" "decode b=64"; do
  g1=$(tok_s "$OUT/bench_8b_tp1.md" "$w")
  g4=$(tok_s "$OUT/bench_8b_tp4.md" "$w tp4")
  [ "$w" = "prefill 512" ] && g4=$(tok_s "$OUT/bench_8b_tp4.md" "$w")
  echo "| $w | ${g1:--} | ${g4:--} | $(ratio "${g1:-0}" "${g4:-0}") |"
done
# At most 8 files come back from a call: the logs travel as one archive beside the markdown tables.
(cd "$OUT" && tar -czf tp4_logs.tgz ./*.log 2>/dev/null && rm -f ./*.log)
