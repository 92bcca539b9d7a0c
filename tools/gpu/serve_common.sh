# Shared by the serving benchmarks (source it): the Llama-3.1-8B shape as a model folder of config.json
# and the default model's tokenizer (weights drawn at load with --random-weights), and a `drift serve`
# on it. Expects DRIFT (the binary) and OUT.

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
    --max-num-seqs 128 --no-access-log "$@" >"$log" 2>&1 &
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
