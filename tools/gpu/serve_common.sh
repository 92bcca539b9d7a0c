# Shared by the serving benchmarks (source it): the Llama-3.1-8B shape as a model folder of config.json
# and the default model's tokenizer (weights drawn at load with --random-weights), a `drift serve` on it,
# and one table row of `drift bench serve` at a request rate against any OpenAI-compatible server.
# Expects DRIFT (the binary) and OUT.

make_8b_model() {  # -> prints the folder
  local model=/tmp/drift-llama-8b-shape
  mkdir -p "$model"
  cp models/default/tokenizer.json models/default/tokenizer_config.json "$model/"
  cat >"$model/config.json" <<'JSON'
{"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336,
 "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
 "vocab_size": 128256, "max_position_embeddings": 8192, "rms_norm_eps": 1e-5, "rope_theta": 500000.0,
 "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                  "original_max_position_embeddings": 8192},
 "tie_word_embeddings": false, "torch_dtype": "bfloat16", "bos_token_id": 1, "eos_token_id": 2}
JSON
  echo "$model"
}

# start_server LOG ARGS... : starts drift serve on the 8B shape; sets SERVER_PID and PORT (empty: failed).
start_server() {
  local log=$1
  shift
  "$DRIFT" serve -m "$(make_8b_model)" --random-weights --device cuda --port 0 --max-model-len 2048 \
    --max-num-seqs "${MAX_NUM_SEQS:-128}" --no-access-log "$@" >"$log" 2>&1 &
  SERVER_PID=$!
  PORT=""
  for _ in $(seq 1 1500); do
    PORT=$(grep -soE 'on http://127\.0\.0\.1:[0-9]+' "$log" | grep -oE '[0-9]+$')
    [ -n "$PORT" ] && return 0
    kill -0 "$SERVER_PID" 2>/dev/null || break
    sleep 0.2
  done
  echo "drift serve did not start"
  tail -20 "$log"
  return 1
}

stop_server() {
  kill -TERM "$SERVER_PID" 2>/dev/null
  wait "$SERVER_PID" 2>/dev/null
}

# bench_rate URL RATE TAG [bench args...]: prompts of 512 random token ids, 128 output tokens (ignore_eos),
# Poisson arrivals at RATE; prints one row of the rate table; the JSON goes to $OUT/serve_TAG_RATE.json.
bench_rate() {
  local url=$1 rate=$2 tag=$3
  shift 3
  local n=$(( rate * 8 < 32 ? 32 : rate * 8 ))
  [ "$rate" -le 1 ] && n=16
  "$DRIFT" bench serve --url "$url" --num-prompts "$n" --request-rate "$rate" --input-len 512 --output-len 128 \
    --num-warmups 2 --output-json "$OUT/serve_${tag}_$rate.json" "$@" >"$OUT/bench_serve_${tag}_$rate.log" 2>&1
  python3 - "$OUT/serve_${tag}_$rate.json" "$rate" "$n" <<'PY'
import json, sys
try:
    r = json.load(open(sys.argv[1]))
except (OSError, ValueError):
    r = {}
def g(*keys):
    for k in keys:
        if k in r: return r[k]
    return float("nan")
print(f"| {sys.argv[2]} | {sys.argv[3]} | {g('request_throughput'):.2f} | {g('output_throughput'):.0f} | "
      f"{g('mean_ttft_ms'):.1f} / {g('p99_ttft_ms'):.1f} | {g('mean_tpot_ms'):.2f} / {g('p99_tpot_ms'):.2f} | "
      f"{g('mean_itl_ms'):.2f} / {g('p99_itl_ms'):.2f} |")
PY
}

RATE_TABLE_HEAD="| rate (req/s) | prompts | req/s done | output tok/s | TTFT mean / p99 ms | TPOT mean / p99 ms | ITL mean / p99 ms |
|---:|---:|---:|---:|---:|---:|---:|"
