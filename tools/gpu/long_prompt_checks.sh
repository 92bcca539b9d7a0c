#!/usr/bin/env bash
# Long prompts fed in chunks on the GPU: each (shape, prompt, chunk) runs drift_bench_decode's chunked
# prefill and a few decode steps; the first that fails is run again under compute-sanitizer (memcheck) to
# name the kernel and address. Prints one line per case and the sanitizer's first report. Logs in $OUT.
#
# There:  tools/gpu/long_prompt_checks.sh ["SHAPE PROMPT CHUNK" ...]   (carry [".gpu-sysroot.tar.xz"])
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/drift-gpu-out}
mkdir -p "$OUT"
BUILD=build-gpu
t_start=$SECONDS
. tools/gpu/setup.sh
configure_build . "$BUILD" -DDRIFT_TESTS=ON -DDRIFT_BENCH=ON || exit 1
ninja -C "$BUILD" -j16 drift_bench_decode >"$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
echo "build done after $((SECONDS - t_start)) s"
BENCH=$BUILD/bench/decode/drift_bench_decode

cases=("$@")
[ ${#cases[@]} -eq 0 ] && cases=("llama-3.2-1b 8192 1024" "llama-3.2-1b 32768 1024" "llama-3.1-8b 32768 1024")
first_failure=""
for c in "${cases[@]}"; do
  read -r shape prompt chunk <<<"$c"
  log="$OUT/${shape}_${prompt}_${chunk}.log"
  args=(--model "$shape" --prompt "$prompt" --prefill "$chunk" --batch 1 --gen 4 --forward-only false --eager false)
  timeout 300 "$BENCH" "${args[@]}" >"$log" 2>&1
  rc=$?
  echo "$shape prompt $prompt in chunks of $chunk: rc=$rc $(grep -hE 'CUDA error|check failed|illegal' "$log" | head -1)"
  [ $rc -ne 0 ] && [ -z "$first_failure" ] && first_failure="${args[*]}"
done
if [ -n "$first_failure" ]; then
  echo "== compute-sanitizer on: $first_failure"
  # shellcheck disable=SC2086
  timeout 400 /usr/local/cuda/bin/compute-sanitizer --tool memcheck --print-limit 5 "$BENCH" $first_failure \
    >"$OUT/sanitizer.log" 2>&1
  grep -m1 -B2 -A25 "========= Invalid\|========= Program hit" "$OUT/sanitizer.log" | head -60
fi
echo "done after $((SECONDS - t_start)) s"
