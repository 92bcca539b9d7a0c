#!/usr/bin/env bash
# Starts `drift serve` on a copy of the llama fixture with a chat template, installs the pinned OpenAI
# client from npm and runs client.test.mjs against the server; the server must then stop cleanly on
# SIGTERM. Needs node, npm and the npm registry.
# Usage: run.sh DRIFT_BINARY FIXTURE_MODEL_DIR [WORK_DIR]
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
drift="$1"
fixture="$2"
work="${3:-$(mktemp -d)}"
mkdir -p "$work"
cp "$here/package.json" "$here/package-lock.json" "$here/client.test.mjs" "$work/"
(cd "$work" && npm ci --no-audit --no-fund --loglevel=error)

model="$work/llama"
rm -rf "$model" && mkdir -p "$model" && cp "$fixture"/* "$model/"
# Llama 3's turns; the comment marks it as a Hermes tool-call template (<tool_call> replies), so tools work.
cat >"$model/chat_template.jinja" <<'TEMPLATE'
{# <tool_call> #}{{ bos_token }}{% for message in messages %}<|start_header_id|>{{ message['role'] }}<|end_header_id|>

{{ message['content'] | trim }}<|eot_id|>{% endfor %}{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>

{% endif %}
TEMPLATE

log="$work/serve.log"
"$drift" serve -m "$model" --port 0 --api-key drift-test --kv-cache-bytes 32000000 >"$log" 2>&1 &
server=$!
trap 'kill -9 $server 2>/dev/null || true' EXIT
port=""
for _ in $(seq 1 300); do
  port=$(grep -oE 'on http://127\.0\.0\.1:[0-9]+' "$log" | grep -oE '[0-9]+$' || true)
  [ -n "$port" ] && break
  kill -0 $server 2>/dev/null || { cat "$log"; exit 1; }
  sleep 0.1
done
[ -n "$port" ] || { echo "drift serve did not start"; cat "$log"; exit 1; }

status=0
(cd "$work" && DRIFT_URL="http://127.0.0.1:$port/v1" DRIFT_API_KEY=drift-test DRIFT_MODEL=llama \
  node --test --test-reporter=spec client.test.mjs) || status=$?
kill -TERM $server
wait $server || { echo "drift serve exited with $? after SIGTERM"; cat "$log"; exit 1; }
trap - EXIT
exit $status
