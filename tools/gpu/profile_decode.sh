#!/usr/bin/env bash
# Per-kernel GPU times of batch-1 decode steps under Nsight Compute (kernels serialised, so the sum is
# the work without overlap): a few decode steps of the given model shape, each Drift kernel's count and
# mean duration, largest total first. Run after tools/gpu/run_cuda_checks.sh (same build folder).
#   tools/gpu/profile_decode.sh [llama-3.2-1b|llama-3.1-8b|gpt-oss-20b] [extra drift_bench_decode arguments]
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/drift-gpu-out}
MODEL=${1:-llama-3.2-1b}
[ $# -gt 0 ] && shift
LIBDIR=/tmp/drift-sysroot/usr/lib/x86_64-linux-gnu
export LD_LIBRARY_PATH=$LIBDIR:$LIBDIR/openblas-pthread${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
CSV=$OUT/ncu_$MODEL.csv
# Prompt 16 keeps the prefill short; 2 timed steps after 3 warm-up steps; runner path only.
timeout 300 "$NCU" --csv --metrics gpu__time_duration.sum --kernel-name regex:'gemv|attention|rms_norm|rope|silu|sample|gather|add_|write_kv|moe|route' \
  --launch-count 1200 \
  build-gpu/bench/decode/drift_bench_decode --model "$MODEL" --batch 1 --prefill 16 --prompt 16 --gen 2 \
  --eager false --forward-only false "$@" >"$CSV" 2>"$OUT/ncu_$MODEL.err"
echo "ncu rc=$?"
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
    name = r["Kernel Name"].split("(")[0].replace("drift::backend::cuda::", "")[:70]
    v = float(r["Metric Value"].replace(",", ""))
    unit = r.get("Metric Unit", "nsecond")
    per[name].append(v / 1000.0 if unit.startswith("n") else v)
total = sum(sum(v) for v in per.values())
print(f"{'kernel':70s} {'count':>6s} {'mean us':>9s} {'total us':>10s}")
for name, v in sorted(per.items(), key=lambda kv: -sum(kv[1])):
    print(f"{name:70s} {len(v):6d} {sum(v)/len(v):9.2f} {sum(v):10.1f}")
print(f"total {total:.1f} us over {sum(len(v) for v in per.values())} kernels")
PY
