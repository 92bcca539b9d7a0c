#!/usr/bin/env bash
# Starts `drift serve` on a copy of the llama fixture with a chat template, installs the pinned OpenAI
# client from npm and runs client.test.mjs against the server; then the same for a copy of the gpt_oss
# fixture that speaks harmony and harmony.test.mjs. Each server must then stop cleanly on SIGTERM. Needs
# node, npm and the npm registry.
# Usage: run.sh DRIFT_BINARY FIXTURE_MODEL_DIR [WORK_DIR]
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
drift="$1"
fixture="$2"
work="${3:-$(mktemp -d)}"
mkdir -p "$work"
cp "$here/package.json" "$here/package-lock.json" "$here/common.mjs" "$here/client.test.mjs" "$here/harmony.test.mjs" \
  "$work/"
(cd "$work" && npm ci --no-audit --no-fund --loglevel=error)

model="$work/llama"
rm -rf "$model" && mkdir -p "$model" && cp "$fixture"/* "$model/"
# Llama 3's turns; the comment marks it as a Hermes tool-call template (<tool_call> replies), so tools work.
cat >"$model/chat_template.jinja" <<'TEMPLATE'
{# <tool_call> #}{{ bos_token }}{% for message in messages %}<|start_header_id|>{{ message['role'] }}<|end_header_id|>

{{ message['content'] | trim }}<|eot_id|>{% endfor %}{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>

{% endif %}
TEMPLATE

# GPT-OSS in harmony: the gpt_oss fixture given harmony's special tokens at ids its vocabulary leaves free
# (as tests/support/model_copy.cc does) and a context that fits harmony's system and developer messages;
# no chat template, so the server renders harmony.
harmony="$work/gpt_oss"
rm -rf "$harmony" && mkdir -p "$harmony" && cp "$(dirname "$fixture")/gpt_oss"/* "$harmony/"
node --input-type=module - "$harmony" <<'NODE'
import fs from "node:fs";
const dir = process.argv[2];
const tok = JSON.parse(fs.readFileSync(`${dir}/tokenizer.json`));
let id = Math.max(Object.keys(tok.model.vocab).length, ...tok.added_tokens.map((t) => t.id + 1));
for (const content of ["<|start|>", "<|end|>", "<|message|>", "<|channel|>", "<|constrain|>", "<|return|>", "<|call|>"])
  tok.added_tokens.push({ id: id++, content, single_word: false, lstrip: false, rstrip: false, normalized: false, special: true });
fs.writeFileSync(`${dir}/tokenizer.json`, JSON.stringify(tok));
const config = JSON.parse(fs.readFileSync(`${dir}/config.json`));
config.max_position_embeddings = 1024;
fs.writeFileSync(`${dir}/config.json`, JSON.stringify(config));
NODE

# serve MODEL_DIR NAME: starts `drift serve` in the background; sets $server (its pid) and $port.
serve() {
  log="$work/serve-$2.log"
  "$drift" serve -m "$1" --port 0 --api-key drift-test --kv-cache-bytes 32000000 >"$log" 2>&1 &
  server=$!
  port=""
  for _ in $(seq 1 300); do
    port=$(grep -oE 'on http://127\.0\.0\.1:[0-9]+' "$log" | grep -oE '[0-9]+$' || true)
    [ -n "$port" ] && return 0
    kill -0 $server 2>/dev/null || { cat "$log"; exit 1; }
    sleep 0.1
  done
  echo "drift serve did not start"; cat "$log"; exit 1
}

# run_client MODEL_DIR NAME TEST_FILE: serves the model, runs the test file against it, stops the server.
run_client() {
  serve "$1" "$2"
  trap 'kill -9 $server 2>/dev/null || true' EXIT
  local status=0
  (cd "$work" && DRIFT_URL="http://127.0.0.1:$port/v1" DRIFT_API_KEY=drift-test DRIFT_MODEL="$2" \
    node --test --test-reporter=spec "$3") || status=$?
  kill -TERM $server
  wait $server || { echo "drift serve exited with $? after SIGTERM"; cat "$log"; exit 1; }
  trap - EXIT
  return $status
}

status=0
run_client "$model" llama client.test.mjs || status=$?
run_client "$harmony" gpt_oss harmony.test.mjs || status=$?
exit $status
