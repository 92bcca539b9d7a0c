#!/usr/bin/env bash
# Issue 16 on the GPU machine, one call per mode (run from the repository root):
#   train  the retrofit sweep (tools/retrofit/run_on_device.sh) in the background beside
#          `run_cuda_checks.sh test`, then `drift perplexity` on CUDA of the default model alone and with each
#          trained file: the engine's bits/byte beside the tool's. carry: [".gpu-sysroot.tar.xz", ".corpus-device"]
#          (tools/gpu/pack_sysroot.sh; .corpus-device: the first 20M characters of .corpus/train.txt.xz, which
#          is all the sweep reads, with valid.txt), and leave models/drift-mla-14m out (64 MiB tree).
#   test   `run_cuda_checks.sh test`, models_test's Retrofit* (CUDA = CPU with each retrofit), and `drift
#          perplexity` on CUDA of the default model alone and with each file in .retrofit-files/ (trained files
#          brought back from a sweep). carry: [".gpu-sysroot.tar.xz", ".retrofit-files"].
#   sweep "ARGS" "ARGS" ...  one retrofit.py run per quoted argument list (at most 6), side by side on the GPU
#          (the 15M model leaves it mostly idle), each with its own table and retrofits_run{j}.tar.gz.
#          carry: [".corpus-device"].
#   bench  the Llama-3.1-8B speed table: attention alone (drift_bench_mla at MLA-lite's geometry, drift_bench_dsa)
#          and whole decode steps (drift_bench_decode --retrofit original mla-lite dsa-lite both) at batch 1 x 32k
#          and batch 64 x 8k (MLA-lite: d_c 384 + one shared RoPE key of 16 frequencies, the tool's defaults
#          scaled). carry: [".gpu-sysroot.tar.xz"]. Another MLA-lite geometry: MLA_WIDTH, MLA_DV (attention alone)
#          and MLA_ARGS (drift_bench_decode), e.g. the 2026-11-27 table's 8 frequencies per KV head:
#          MLA_WIDTH=512 MLA_DV=384 MLA_ARGS="--mla-freqs 8 --mla-shared-rope false". RETROFIT_TESTS=1 first builds
#          and runs models_test's Retrofit* (CUDA = CPU with each retrofit form).
# $OUT gets summary.txt, logs.tar.gz, and in train mode results.json and retrofits.tar.gz.
set -uo pipefail
cd "$(dirname "$0")/../.."
MODE=${1:-train}
FINAL_OUT=${OUT:-/tmp/drift-gpu-out}
WORK=/tmp/drift-retrofit-checks
mkdir -p "$FINAL_OUT" "$WORK"
t_start=$SECONDS

perplexities() {  # the engine's bits/byte on $1 (valid.txt): the model, then each trained file in $WORK/files
  local drift=build-gpu/apps/drift/drift valid=$1
  [ -x "$drift" ] || { echo "no drift binary"; return; }
  echo "| retrofit | bits/byte (drift, cuda) | KV bytes/token |"
  echo "|---|---:|---:|"
  for f in none "$WORK"/files/*.safetensors; do
    local args=() name=none
    [ "$f" != none ] && args=(--retrofit "$f") && name=$(basename "$f" .safetensors)
    local bpb kv
    bpb=$(timeout 60 "$drift" perplexity -f "$valid" --device cuda "${args[@]}" 2>&1 | grep "^bits per byte" | grep -oE "[0-9.]+$")
    kv=$(timeout 30 "$drift" inspect "${args[@]}" 2>&1 | grep "^kv per token" | sed "s/^kv per token *//")
    echo "| $name | ${bpb:-?} | ${kv:-?} |"
  done
}

if [ "$MODE" = train ]; then
  (OUT=$WORK/retrofit DRIFT_CORPUS=.corpus-device bash tools/retrofit/run_on_device.sh >"$WORK/retrofit_run.log" 2>&1) &
  train_pid=$!
  OUT=$WORK/checks BENCH_DEADLINE=0 bash tools/gpu/run_cuda_checks.sh test >"$WORK/checks_summary.txt" 2>&1
  wait $train_pid
  echo "sweep done after $((SECONDS - t_start)) s"
  mkdir -p "$WORK/files" && tar -C "$WORK/files" -xzf "$WORK/retrofit/retrofits.tar.gz" 2>/dev/null
  perplexities .corpus-device/valid.txt >"$WORK/perplexity.md" 2>&1
  cp "$WORK/retrofit/results.json" "$WORK/retrofit/retrofits.tar.gz" "$FINAL_OUT/" 2>/dev/null
  { echo "== CUDA checks"; tail -25 "$WORK/checks_summary.txt"; echo "== sweep (tail of retrofit.log)";
    tail -30 "$WORK/retrofit/retrofit.log" 2>/dev/null || tail -30 "$WORK/retrofit_run.log";
    echo "== drift perplexity on CUDA"; cat "$WORK/perplexity.md"; } >"$WORK/summary.txt"
elif [ "$MODE" = test ]; then
  OUT=$WORK/checks bash tools/gpu/run_cuda_checks.sh test >"$WORK/checks_summary.txt" 2>&1
  timeout 120 build-gpu/tests/models/models_test --gtest_filter='Retrofit*' >"$WORK/models_retrofit.log" 2>&1
  echo "models_test Retrofit*: rc=$?, $(grep -cE '^\[       OK' "$WORK/models_retrofit.log") ok" >"$WORK/retrofit_tests.txt"
  mkdir -p "$WORK/files" && cp .retrofit-files/*.safetensors "$WORK/files/" 2>/dev/null
  valid=$WORK/valid.txt
  cp .retrofit-files/valid.txt "$valid" 2>/dev/null || cp tests/fixtures/text/kv_quality.txt "$valid"
  perplexities "$valid" >"$WORK/perplexity.md" 2>&1
  for kv in bf16 fp8; do
    echo "| default, KV $kv | $(timeout 60 build-gpu/apps/drift/drift perplexity -f "$valid" --device cuda \
      --kv-cache-dtype $kv 2>&1 | grep '^bits per byte' | grep -oE '[0-9.]+$') | |"
  done >>"$WORK/perplexity.md"
  { echo "== CUDA checks"; sed -n '/== summary/,$p' "$WORK/checks_summary.txt"; grep -hA5 "Failure$" "$WORK"/checks/*.log | head -40
    cat "$WORK/retrofit_tests.txt"; grep -E "FAILED|Failure" -A3 "$WORK/models_retrofit.log" | head -20
    echo "== drift perplexity on CUDA ($(wc -c <"$valid") bytes)"; cat "$WORK/perplexity.md"; } >"$WORK/summary.txt"
elif [ "$MODE" = sweep ]; then
  shift
  i=0
  for args in "$@"; do
    i=$((i + 1))
    # shellcheck disable=SC2086  # each argument is a list of retrofit.py options
    (timeout 540 python3 tools/retrofit/retrofit.py --model models/default --corpus .corpus-device \
      --out "$WORK/run$i" $args >"$WORK/run$i.log" 2>&1) &
  done
  wait
  for j in $(seq 1 $i); do
    echo "== run $j: ${*:j:1}"
    grep -E "^\| (mla|dsa|both)" "$WORK/run$j.log" || tail -5 "$WORK/run$j.log"
  done >"$WORK/summary.txt"
  for j in $(seq 1 $i); do  # one tarball a run: all together pass the 16 MiB a file may bring back
    tar -C "$WORK" -czf "$FINAL_OUT/retrofits_run$j.tar.gz" $(cd "$WORK" && ls run$j/*.safetensors 2>/dev/null)
  done
elif [ "$MODE" = bench ]; then
  . tools/gpu/setup.sh
  targets=(drift_bench_decode drift_bench_mla drift_bench_dsa)
  tests=OFF
  [ "${RETROFIT_TESTS:-0}" = 1 ] && targets+=(models_test) && tests=ON
  configure_build . build-gpu -DDRIFT_TESTS=$tests -DDRIFT_BENCH=ON || exit 1
  ninja -C build-gpu -j16 "${targets[@]}" >"$WORK/build.log" 2>&1 || grep -E "error|FAILED" "$WORK/build.log" | head -20
  echo "built after $((SECONDS - t_start)) s" >"$WORK/retrofit_tests.txt"
  if [ "$tests" = ON ]; then  # RETROFIT_TESTS=1: models_test's Retrofit* (CUDA = CPU with each retrofit form) first
    timeout 120 build-gpu/tests/models/models_test --gtest_filter='Retrofit*' >"$WORK/models_retrofit.log" 2>&1
    echo "models_test Retrofit*: rc=$?, $(grep -cE '^\[       OK' "$WORK/models_retrofit.log") ok" >>"$WORK/retrofit_tests.txt"
    grep -E "FAILED|Failure" -A3 "$WORK/models_retrofit.log" | head -20 >>"$WORK/retrofit_tests.txt"
  fi
  B=build-gpu/bench/decode
  timeout 60 $B/drift_bench_mla --heads 32 --batch 1 64 --context 8192 32768 --width "${MLA_WIDTH:-416}" --dv "${MLA_DV:-384}" \
    --block-size 16 --markdown "$WORK/mla_lite.md" >"$WORK/mla_lite.log" 2>&1
  [ -x $B/drift_bench_dsa ] && timeout 90 $B/drift_bench_dsa --markdown "$WORK/dsa.md" >"$WORK/dsa.log" 2>&1
  left=$((${BENCH_LEFT:-560} - (SECONDS - t_start)))  # BENCH_LEFT: seconds this mode may take
  # shellcheck disable=SC2086  # MLA_ARGS: drift_bench_decode's geometry options, e.g. "--mla-freqs 16 --mla-shared-rope true"
  timeout "$left" $B/drift_bench_decode --model llama-3.1-8b --retrofit original mla-lite dsa-lite both ${MLA_ARGS:-} \
    --prompt "${PROMPT:-32768}" --batch ${BATCHES:-1} --prefill 512 --gen 32 --eager 0 --forward-only 0 \
    --markdown "$WORK/decode.md" >"$WORK/decode.log" 2>&1
  { cat "$WORK/retrofit_tests.txt"; echo "== attention alone: MLA-lite (row ${MLA_WIDTH:-416}, values ${MLA_DV:-384}, 32 heads)"; cat "$WORK/mla_lite.md" 2>/dev/null;
    echo "== attention alone: dense vs DSA-lite"; cat "$WORK/dsa.md" 2>/dev/null || tail -5 "$WORK/dsa.log";
    echo "== decode steps"; grep -E "fit|skipped" "$WORK/decode.log"; cat "$WORK/decode.md" 2>/dev/null || tail -20 "$WORK/decode.log"; } >"$WORK/summary.txt"
fi
tar -C "$WORK" -czf "$FINAL_OUT/logs.tar.gz" --exclude=files --exclude='*.safetensors' --exclude=retrofits.tar.gz .
cp "$WORK/summary.txt" "$FINAL_OUT/"
cat "$WORK/summary.txt"
echo "total $((SECONDS - t_start)) s"
