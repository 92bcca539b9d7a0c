#!/usr/bin/env bash
# Goodput of SLO-aware scheduling against the fixed token budget on the GPU: the same `drift serve` (8B
# shape, random weights) run three times: the default budget ("fixed"); --slo-tpot-ms/--slo-ttft-ms with
# --slo-shed off ("slo": the budget, and requests that would miss the TTFT target wait behind those that
# can meet it); and with --slo-shed on ("slo+shed": those predicted to miss it by far are refused at once, a
# 503 / error chunk that the client counts as failed). Each is driven by `drift bench serve --goodput` at
# rising request rates. Prints one row per (policy, rate); logs and JSON in $OUT.
# Usage: tools/gpu/slo_bench.sh [TPOT_MS TTFT_MS [rates...]]   (default: 25 1000, rates 16 24 32 40)
#        POLICIES="slo slo+shed" tools/gpu/slo_bench.sh ...      runs only those policies
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/drift-gpu-out}
DRIFT=build-gpu/apps/drift/drift
tpot=${1:-25}
ttft=${2:-1000}
shift 2 2>/dev/null
rates=("$@")
[ ${#rates[@]} -eq 0 ] && rates=(16 24 32 40)
. tools/gpu/serve_common.sh
trap 'kill -9 $SERVER_PID 2>/dev/null' EXIT
echo "SLO: TTFT <= $ttft ms, TPOT <= $tpot ms; prompts 512 tokens, 128 output tokens"
echo "| policy | rate (req/s) | prompts | goodput (req/s) | req/s done | shed | TTFT mean / p99 ms | TPOT mean / p99 ms |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|"
for policy in ${POLICIES:-fixed slo slo+shed}; do
  args=()
  [ "$policy" = slo ] && args=(--slo-tpot-ms "$tpot" --slo-ttft-ms "$ttft" --slo-shed off)
  [ "$policy" = slo+shed ] && args=(--slo-tpot-ms "$tpot" --slo-ttft-ms "$ttft" --slo-shed on)
  name=${policy/+/_}
  start_server "$OUT/serve_$name.log" "${args[@]}" || exit 1
  for rate in "${rates[@]}"; do
    n=$((rate * 8))
    "$DRIFT" bench serve --url "http://127.0.0.1:$PORT" --num-prompts "$n" --request-rate "$rate" --input-len 512 \
      --output-len 128 --num-warmups 2 --goodput "ttft:$ttft" "tpot:$tpot" \
      --output-json "$OUT/slo_${name}_$rate.json" >"$OUT/slo_${name}_$rate.log" 2>&1
    # Failed requests are the shed ones (a 503 or an error chunk); the latencies are of those that completed.
    python3 - "$OUT/slo_${name}_$rate.json" "$policy" "$rate" "$n" <<'PY'
import json, sys
try:
    r = json.load(open(sys.argv[1]))
except (OSError, ValueError):
    r = {}  # the bench failed: its log says why
g = lambda k: r.get(k) if r.get(k) is not None else float("nan")
print(f"| {sys.argv[2]} | {sys.argv[3]} | {sys.argv[4]} | {g('request_goodput'):.2f} | {g('request_throughput'):.2f} | "
      f"{g('failed'):.0f} | {g('mean_ttft_ms'):.1f} / {g('p99_ttft_ms'):.1f} | {g('mean_tpot_ms'):.2f} / {g('p99_tpot_ms'):.2f} |")
PY
  done
  # The server's own count of shed requests, to check against the client's failures.
  curl -s "http://127.0.0.1:$PORT/metrics" | grep '^drift:num_requests_shed_total' >>"$OUT/serve_$name.log"
  stop_server
done
