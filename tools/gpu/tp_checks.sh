#!/usr/bin/env bash
# Tensor parallelism on a 2-GPU machine (issue 18): build the CUDA targets (sysroot from the carried
# .debs, sm_90a, NCCL from the CUDA toolkit), run the 2-GPU tests (NCCL collectives, fixture logits over
# 2 GPUs against 1, the engine over 2 GPUs against 1), compare `drift generate --tensor-parallel 2` with one
# GPU and two `drift generate --nnodes 2` processes (one GPU each, NCCL across processes) with it,
# benchmark the Llama-3.1-8B shape at TP=1 and TP=2 (decode batch 1 and 64, graphs and eager) with the
# all-reduce time per decode step, then a GPT-OSS shape on one GPU, EP=2 and TP=2. Prints a short table last; logs go to $OUT. Total under 8 minutes:
# every step has a timeout, and the benchmark gets what is left before TP_DEADLINE.
#
# Here, once:   mkdir -p .debs && (cd .debs && apt-get download $(grep -v "^#" ../tools/gpu/debs.txt))
# There:        tools/gpu/tp_checks.sh   (the run tool: kind nvidia-h100-x2, carry [".gpu-sysroot.tar.xz"]; delete
#               models/drift-mla-14m here first for the 64 MiB tree limit, and restore it after)
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/drift-gpu-out}
mkdir -p "$OUT"
BUILD=build-gpu
TP_DEADLINE=${TP_DEADLINE:-450}  # seconds since start by which every step has ended
t_start=$SECONDS
export NCCL_NVLS_ENABLE=0  # NVLink multicast stays off on these machines
export NCCL_DEBUG=${NCCL_DEBUG:-WARN}  # NCCL says why when a collective or the group setup fails
. tools/gpu/setup.sh

cap() {  # a step's timeout: $1 seconds, or what is left before the deadline when less (at least 20)
  local l
  l=$(left 20)
  [ "$1" -lt "$l" ] && l=$1
  echo "$l"
}

gpus=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | wc -l)
{
  nvidia-smi --query-gpu=index,name,memory.total --format=csv
  nvidia-smi topo -m 2>&1 | head -6
  echo "GPUs: $gpus; NCCL_NVLS_ENABLE=$NCCL_NVLS_ENABLE; cores: $(nproc)"
} 2>&1 | tee "$OUT/tp_build.log"
[ "$gpus" -lt 2 ] && echo "WARNING: fewer than 2 GPUs: the 2-GPU tests will skip and the TP=2 benchmark cannot run"

configure_build . "$BUILD" -DDRIFT_TESTS=ON -DDRIFT_BENCH=ON || exit 1
grep -E "drift:" /tmp/drift-configure.log >>"$OUT/tp_build.log" 2>/dev/null
grep -hE "drift: NCCL" /tmp/drift-configure.log 2>/dev/null || grep -E "^DRIFT_NCCL_LIBRARY" "$BUILD/CMakeCache.txt"
timeout "$(cap 300)" ninja -C "$BUILD" -j16 -k 0 cuda_tp_test cuda_engine_test drift_bench_decode drift >>"$OUT/tp_build.log" 2>&1
build_rc=$?
echo "build rc=$build_rc after $((SECONDS - t_start)) s"
[ $build_rc -ne 0 ] && grep -E "error|FAILED" "$OUT/tp_build.log" | head -30

# The 2-GPU tests.
tp_rc=skip engine_rc=skip
if [ -x "$BUILD/tests/ops/cuda_tp_test" ]; then
  timeout "$(cap 120)" "$BUILD/tests/ops/cuda_tp_test" >"$OUT/cuda_tp_test.log" 2>&1
  tp_rc=$?
fi
if [ -x "$BUILD/tests/ops/cuda_engine_test" ]; then
  timeout "$(cap 150)" "$BUILD/tests/ops/cuda_engine_test" --gtest_filter='*TensorParallel*' >"$OUT/cuda_engine_tp_test.log" 2>&1
  engine_rc=$?
fi
echo "tests done after $((SECONDS - t_start)) s"

# drift generate, greedy, on the default model (the llama fixture when the call's tree left the default
# model's weights out): 2 GPUs against 1.
generate="drift binary not built"
DRIFT=$BUILD/apps/drift/drift
MODEL=models/default
[ -f "$MODEL/model.safetensors" ] || MODEL=tests/fixtures/models/llama
if [ -x "$DRIFT" ]; then
  for tp in 1 2; do
    timeout "$(cap 60)" "$DRIFT" generate -m "$MODEL" --device cuda --tensor-parallel "$tp" -p "Once upon a time" --max-tokens 32 \
      --ignore-eos --output json >"/tmp/generate_tp$tp.json" 2>"/tmp/generate_tp$tp.err"
    { echo "== tp $tp (rc=$?)"; cat "/tmp/generate_tp$tp.json" "/tmp/generate_tp$tp.err"; } >>"$OUT/tp_generate.txt"
  done
  # Two processes as two nodes (--nnodes 2: node r on GPU r, NCCL joined through node 0's id), node 1 first.
  NODES=(--nnodes 2 --master-port 29611)
  timeout "$(cap 90)" "$DRIFT" generate -m "$MODEL" --device cuda "${NODES[@]}" --node-rank 1 -p "Once upon a time" \
    --max-tokens 32 --ignore-eos --output json >/tmp/generate_node1.txt 2>&1 &
  timeout "$(cap 90)" "$DRIFT" generate -m "$MODEL" --device cuda "${NODES[@]}" -p "Once upon a time" --max-tokens 32 \
    --ignore-eos --output json >/tmp/generate_nodes.json 2>/tmp/generate_nodes.err
  nodes_rc=$?
  wait
  { echo "== 2 nodes (node 0 rc=$nodes_rc)"; cat /tmp/generate_nodes.json /tmp/generate_nodes.err; echo "== node 1";
    cat /tmp/generate_node1.txt; } >>"$OUT/tp_generate.txt"
  nodes=$(python3 - /tmp/generate_tp2.json /tmp/generate_nodes.json <<'PY' 2>&1
import json, sys
def ids(path):
    line = next(l for l in open(path) if l.startswith("{"))
    return json.loads(line)["generated_token_ids"]
print("identical" if ids(sys.argv[1]) == ids(sys.argv[2]) else "different")
PY
)
  generate=$(python3 - /tmp/generate_tp1.json /tmp/generate_tp2.json <<'PY' 2>&1
import json, sys
def ids(path):
    line = next(l for l in open(path) if l.startswith("{"))
    return json.loads(line)["generated_token_ids"]
one, two = ids(sys.argv[1]), ids(sys.argv[2])
first = next((i for i, (a, b) in enumerate(zip(one, two)) if a != b), None)
print(("identical" if first is None and len(one) == len(two) else f"part at step {first}") + f" ({len(two)} tokens)")
PY
)
fi
echo "generate done after $((SECONDS - t_start)) s"

# The Llama-3.1-8B shape, TP=1 then TP=2, each with CUDA graphs and eager, the same steps.
bench_rc1=skip bench_rc2=skip
BENCH=$BUILD/bench/decode/drift_bench_decode
BENCH_ARGS=(--model llama-3.1-8b --batch 1 64 --prefill 512 --prompt 256 --gen 32 --forward-only 0 --eager 1 --loader random)
if [ -x "$BENCH" ]; then
  l=$(left 60)
  timeout $((l / 2)) "$BENCH" "${BENCH_ARGS[@]}" --markdown "$OUT/bench_tp1.md" >"$OUT/bench_tp1.log" 2>&1
  bench_rc1=$?
  if [ "$gpus" -ge 2 ]; then
    timeout "$(left 60)" "$BENCH" "${BENCH_ARGS[@]}" --tensor-parallel 2 --markdown "$OUT/bench_tp2.md" \
      >"$OUT/bench_tp2.log" 2>&1
    bench_rc2=$?
  fi
  echo "bench done after $((SECONDS - t_start)) s"
fi

# GPT-OSS (MXFP4 experts; TP_MOE_MODEL, default gpt-oss-20b; gpt-oss-120b on H200s) on one GPU, with its
# experts placed over two (EP=2) and with each expert's width split over two (TP=2; the loader pads the
# 1440-wide halves to the kernels' multiple of 64); attention split by heads in both; when time is left and
# TP_MOE is not 0.
moe_rc1=skip moe_rc2=skip moe_rc3=skip
MOE_MODEL=${TP_MOE_MODEL:-gpt-oss-20b}
MOE_ARGS=(--model "$MOE_MODEL" --batch 1 64 --prefill 512 --prompt 256 --gen 32 --forward-only 0 --eager 0)
if [ "${TP_MOE:-1}" != 0 ] && [ -x "$BENCH" ] && [ "$gpus" -ge 2 ] && [ "$(left 0)" -ge 150 ]; then
  timeout $(($(left 60) / 3)) "$BENCH" "${MOE_ARGS[@]}" --markdown "$OUT/bench_moe_tp1.md" >"$OUT/bench_moe_tp1.log" 2>&1
  moe_rc1=$?
  timeout $(($(left 60) / 2)) "$BENCH" "${MOE_ARGS[@]}" --tensor-parallel 2 --expert-parallel --markdown "$OUT/bench_moe_ep2.md" \
    >"$OUT/bench_moe_ep2.log" 2>&1
  moe_rc2=$?
  timeout "$(left 30)" "$BENCH" "${MOE_ARGS[@]}" --tensor-parallel 2 --markdown "$OUT/bench_moe_tp2.md" \
    >"$OUT/bench_moe_tp2.log" 2>&1
  moe_rc3=$?
  echo "moe bench done after $((SECONDS - t_start)) s"
fi


echo
echo "== failures (first lines) =="
grep -hA4 "Failure$" "$OUT"/cuda_tp_test.log "$OUT"/cuda_engine_tp_test.log 2>/dev/null | head -40
grep -hE "check failed|CUDA error|NCCL|illegal" "$OUT"/cuda_*tp*.log "$OUT"/bench_*.log 2>/dev/null | head -8
grep -h "^\[  SKIPPED \]\|skipped\|Skipped" "$OUT"/cuda_tp_test.log 2>/dev/null | head -3
echo "== notes =="
grep -h "^\[ tp       \]" "$OUT/cuda_tp_test.log" 2>/dev/null | head -10
grep -h "^\[ engine   \]" "$OUT/cuda_engine_tp_test.log" 2>/dev/null | head -6
grep -A12 "^all-reduce on" "$OUT/bench_tp2.log" 2>/dev/null
tail -3 "$OUT/bench_tp2.log" 2>/dev/null
echo
echo "== summary ($((SECONDS - t_start)) s) =="
echo "build: rc=$build_rc; GPUs: $gpus"
echo "cuda_tp_test (rc=$tp_rc): $(summary "$OUT/cuda_tp_test.log")"
echo "cuda_engine_test TP (rc=$engine_rc): $(summary "$OUT/cuda_engine_tp_test.log")"
echo "drift generate tp2 vs tp1 ($MODEL): $generate"
echo "drift generate --nnodes 2 (two processes) vs --tensor-parallel 2: ${nodes:-not run}; node 1: $(tail -1 /tmp/generate_node1.txt 2>/dev/null)"
echo "bench rc: tp1=$bench_rc1 tp2=$bench_rc2 (Llama-3.1-8B shape, random weights)"
echo "| workload | TP=1 tok/s | TP=2 tok/s | TP=2 / TP=1 | TP=1 eager | TP=2 eager | eager TP=2 / TP=1 |"
echo "|---|---:|---:|---:|---:|---:|---:|"
for w in "prefill 512" "decode b=1" "decode b=64"; do
  g1=$(tok_s "$OUT/bench_tp1.md" "$w")
  e1=$(tok_s "$OUT/bench_tp1.md" "$w eager")
  g2=$(tok_s "$OUT/bench_tp2.md" "$w tp2")
  e2=$(tok_s "$OUT/bench_tp2.md" "$w tp2 eager")
  [ "$w" = "prefill 512" ] && g2=$(tok_s "$OUT/bench_tp2.md" "$w")
  echo "| $w | ${g1:--} | ${g2:--} | $(ratio "${g1:-0}" "${g2:-0}") | ${e1:--} | ${e2:--} | $(ratio "${e1:-0}" "${e2:-0}") |"
done
echo "(issue 18 asks TP=2 >= 1.6x TP=1 at decode b=1; the all-reduce table above gives the time per step it costs)"
echo "moe bench rc: tp1=$moe_rc1 ep2=$moe_rc2 tp2=$moe_rc3 ($MOE_MODEL shape, random MXFP4 experts)"
echo "| workload | one GPU tok/s | EP=2 tok/s | EP=2 / one | TP=2 tok/s | TP=2 / one |"
echo "|---|---:|---:|---:|---:|---:|"
for w in "prefill 512" "decode b=1" "decode b=64"; do
  g1=$(tok_s "$OUT/bench_moe_tp1.md" "$w")
  g2=$(tok_s "$OUT/bench_moe_ep2.md" "$w ep2")
  g3=$(tok_s "$OUT/bench_moe_tp2.md" "$w tp2")
  [ "$w" = "prefill 512" ] && g2=$(tok_s "$OUT/bench_moe_ep2.md" "$w") && g3=$(tok_s "$OUT/bench_moe_tp2.md" "$w")
  echo "| $w | ${g1:--} | ${g2:--} | $(ratio "${g1:-0}" "${g2:-0}") | ${g3:--} | $(ratio "${g1:-0}" "${g3:-0}") |"
done
grep -h "^drift: .*ms per step" "$OUT/tp_generate.txt" 2>/dev/null
# At most 8 files come back from a call: the logs travel as one archive beside the markdown tables.
(cd "$OUT" && tar -czf tp_logs.tgz ./*.log ./*.txt 2>/dev/null && rm -f ./*.log ./*.txt)
