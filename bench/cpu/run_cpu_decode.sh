#!/usr/bin/env bash
# CPU decode speed of every fixture model, the trained default models and a ~100M-parameter Llama with
# random weights (bench/cpu/llama-100m): batch-1 greedy decode of 128 tokens after a short prompt.
# Usage: bench/cpu/run_cpu_decode.sh [build dir]
set -euo pipefail
cd "$(dirname "$0")/../.."
drift=${1:-build}/apps/drift/drift
printf '%-22s %12s %14s\n' model parameters "decode tok/s"
run() {
  local name=$1; shift
  local params
  # inspect reads safetensors headers: a random-weights model has none, so its count stays blank.
  params=$("$drift" inspect "$@" 2>/dev/null | awk '/^parameters/ {print $2}' || true)
  local rate
  rate=$("$drift" generate "$@" --prompt "The history of" --max-tokens 128 --ignore-eos 2>&1 >/dev/null |
         sed -n 's/.*(\([0-9.]*\) tokens\/s).*/\1/p')
  printf '%-22s %12s %14s\n' "$name" "${params:-random}" "$rate"
}
for m in llama llama-bias qwen2 qwen3 deepseek_v2 deepseek_v3 youtu gpt_oss; do
  run "$m" --model tests/fixtures/models/$m
done
run drift-chat-15m --model models/drift-chat-15m
run drift-mla-14m --model models/drift-mla-14m
run llama-96m-random --model bench/cpu/llama-100m --random-weights
