#!/usr/bin/env bash
# The serving benchmark on the GPU: `drift serve --device cuda` on the Llama-3.1-8B shape (random weights,
# the default model's tokenizer) driven by `drift bench serve` at rising request rates, as `vllm bench
# serve` reports it (TTFT, TPOT, ITL). Expects the build of run_cuda_checks.sh (build-gpu/). Prints one
# table row per rate; logs go to $OUT.
# Usage: tools/gpu/serve_bench.sh [rates... | none]   (default: 1 4 16 64; none: only the structured-output rows)
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/drift-gpu-out}
DRIFT=build-gpu/apps/drift/drift
rates=("$@")
[ ${#rates[@]} -eq 0 ] && rates=(1 4 16 64)
[ "${rates[0]}" = none ] && rates=()
. tools/gpu/serve_common.sh
start_server "$OUT/serve.log" || exit 1
port=$PORT
trap 'kill -9 $SERVER_PID 2>/dev/null' EXIT
echo "$RATE_TABLE_HEAD"
for rate in "${rates[@]}"; do
  bench_rate "http://127.0.0.1:$port" "$rate" drift
done
# Structured output's cost per step: 64 streams at once, plain and with every request under a JSON schema;
# the mean inter-token latency is the step time the streams see.
schema='{"type": "json_schema", "json_schema": {"name": "r", "schema": {"type": "object", "properties": {
  "title": {"type": "string", "maxLength": 40}, "count": {"type": "integer"}, "tags": {"type": "array",
  "items": {"type": "string", "maxLength": 20}, "maxItems": 8}, "ok": {"type": "boolean"}},
  "required": ["title", "count", "tags", "ok"], "additionalProperties": false}}}'
echo
echo "| batch 64, 128 tokens | output tok/s | ITL mean / p99 ms | TPOT mean ms | mean output tokens |"
echo "|---|---:|---:|---:|---:|"
for mode in plain schema; do
  extra=()
  [ "$mode" = schema ] && extra=(--response-format "$schema")
  "$DRIFT" bench serve --url "http://127.0.0.1:$port" --num-prompts 256 --max-concurrency 64 --input-len 128 \
    --output-len 128 --num-warmups 2 "${extra[@]}" --output-json "$OUT/serve_$mode.json" >"$OUT/bench_serve_$mode.log" 2>&1
  python3 - "$OUT/serve_$mode.json" "$mode" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
print(f"| {sys.argv[2]} | {r['output_throughput']:.0f} | {r['mean_itl_ms']:.2f} / {r['p99_itl_ms']:.2f} | "
      f"{r['mean_tpot_ms']:.2f} | {r['total_output_tokens'] / max(r['completed'], 1):.1f} |")
PY
done
stop_server
