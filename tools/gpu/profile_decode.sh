#!/usr/bin/env bash
# Per-kernel GPU times of batch-1 decode steps under Nsight Compute, beside the step time of the same
# shape through CUDA graphs: for each model shape, every kernel's count and mean duration, largest total
# first, and the graph step's ms. Kernels are serialised under ncu (no PDL overlap), at the GPU's own
# clocks and with the L2 left as the previous kernel left it (--clock-control none --cache-control none:
# ncu's defaults lock the base clock and flush the L2, which inflates every small kernel), so the sum
# against the graph step says how much launch overlap and tails cost.
#   bash tools/gpu/profile_decode.sh [model shape ...]   (default gpt-oss-20b; builds build-gpu if needed)
# PROMPT (default 512) is the context the steps start at; EXTRA (drift_bench_decode arguments) applies to
# every shape. PREFILL=N profiles one prefill step of N tokens instead of the decode steps; STEP=0 skips the
# graph step's timing run; GEN (default 4) sets the decode steps profiled. Tables and logs go to $OUT.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/drift-gpu-out}
mkdir -p "$OUT"
BUILD=build-gpu
. tools/gpu/setup.sh
[ $# -eq 0 ] && set -- gpt-oss-20b
configure_build . "$BUILD" -DDRIFT_TESTS=ON -DDRIFT_BENCH=ON || exit 1
ninja -C "$BUILD" -j16 drift_bench_decode >>"$OUT/build.log" 2>&1 || { echo "build failed"; tail -30 "$OUT/build.log"; exit 1; }
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
BENCH=$BUILD/bench/decode/drift_bench_decode

for MODEL in "$@"; do
  # Prompt PROMPT (default 512), then the timed steps through the runner with graphs; under ncu only
  # those steps are profiled (the bench brackets them with cudaProfilerStart/Stop).
  # shellcheck disable=SC2086
  [ -z "${PREFILL:-}" ] && [ "${STEP:-1}" = 1 ] && "$BENCH" --model "$MODEL" --batch 1 --prefill 16 --prompt "${PROMPT:-512}" --gen 64 \
    --eager false --forward-only false --markdown "$OUT/step_$MODEL.md" ${EXTRA:-} >"$OUT/step_$MODEL.log" 2>&1
  CSV=$OUT/ncu_$MODEL.csv
  WHAT=(--prefill 16 --gen "${GEN:-4}")
  [ -n "${PREFILL:-}" ] && WHAT=(--prefill "$PREFILL" --gen 1 --profile-prefill true)
  # shellcheck disable=SC2086
  timeout 400 "$NCU" --csv --metrics gpu__time_duration.sum --clock-control none --cache-control none \
    --profile-from-start off \
    "$BENCH" --model "$MODEL" --batch 1 "${WHAT[@]}" --prompt "${PROMPT:-512}" --eager false \
    --forward-only false ${EXTRA:-} >"$CSV" 2>"$OUT/ncu_$MODEL.err"
  echo "== $MODEL: ncu rc=$? =="
  grep -E "decode b=1" "$OUT/step_$MODEL.md" || tail -3 "$OUT/step_$MODEL.log"
  python3 - "$CSV" <<'PY'
import csv, sys, collections, io
text = open(sys.argv[1]).read()
start = text.find('"ID"')
if start < 0:
    print("no ncu rows"); sys.exit()
rows = list(csv.DictReader(io.StringIO(text[start:])))
per = collections.defaultdict(list)
for r in rows:
    if r.get("Metric Name") != "gpu__time_duration.sum": continue
    name = r["Kernel Name"].split("(")[0].replace("drift::backend::cuda::", "").replace("void ", "")[:70]
    v = float(r["Metric Value"].replace(",", ""))
    unit = r.get("Metric Unit", "nsecond")
    per[name].append(v / 1000.0 if unit.startswith("n") else v)
total = sum(sum(v) for v in per.values())
print(f"{'kernel':70s} {'count':>6s} {'mean us':>9s} {'total us':>10s}")
for name, v in sorted(per.items(), key=lambda kv: -sum(kv[1])):
    print(f"{name:70s} {len(v):6d} {sum(v)/len(v):9.2f} {sum(v):10.1f}")
print(f"total {total:.1f} us over {sum(len(v) for v in per.values())} kernels (4 decode steps, or one prefill step)")
PY
done
