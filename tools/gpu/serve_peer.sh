#!/usr/bin/env bash
# The serving benchmark side by side with llama.cpp on one GPU: llama.cpp's llama-server (built here from
# .peer-src/llama.cpp.tgz) on the Llama-3.1-8B shape with random bf16 weights (made and converted to GGUF by
# the anchor scripts, carried as .peer-src/anchor), then `drift serve` on the same shape, both driven by
# `drift bench serve` with the same requests (512 random token ids in, 128 out with ignore_eos, Poisson
# arrivals) at each rate. Token ids go in as ids, so both servers see the same prompt lengths.
#   Here, once: fetch unslothai/llama.cpp, ../shared/anchor/make_peer_src.sh (writes .peer-src/llama.cpp.tgz),
#               cp -r ../shared/anchor .peer-src/anchor
#   There:      tools/gpu/serve_peer.sh [all|peer|drift] [rates...]   (carry [".debs", ".peer-src"]; default
#               rates 1 4 16 64). `peer` then `drift` splits the work over two calls on a warm machine: the
#               builds and the GGUF stay in .peer-build/ and build-gpu/ between them.
# Both servers get 64 sequences at once and 2048 tokens of context per sequence. Logs in $OUT.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/drift-gpu-out}
mkdir -p "$OUT"
DRIFT=build-gpu/apps/drift/drift
ANCHOR=.peer-src/anchor
W=$PWD/.peer-build
MODE=${1:-all}
[ $# -gt 0 ] && shift
rates=("$@")
[ ${#rates[@]} -eq 0 ] && rates=(1 4 16 64)
t0=$SECONDS
. tools/gpu/setup.sh
. tools/gpu/serve_common.sh
mkdir -p "$W/models"

build_peer() {
  [ -x "$W/llama.cpp/build/bin/llama-server" ] && return 0
  tar -xzf .peer-src/llama.cpp.tgz -C "$W" && cd "$W/llama.cpp" &&
    cmake -S . -B build -G Ninja -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DLLAMA_CURL=OFF -DGGML_NATIVE=ON \
      -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=ON -DCMAKE_BUILD_TYPE=Release \
      >"$W/cmake.log" 2>&1 &&
    ninja -C build -j12 llama-server >"$W/build.log" 2>&1
}

make_peer_model() {  # the 8B shape as bf16 GGUF; the HF checkpoint is removed once converted
  [ -f "$W/models/llama8b.gguf" ] && return 0
  python3 "$ANCHOR/make_models.py" "$W/models" llama8b 2>&1 | grep -v Writing
  for _ in $(seq 1 120); do [ -f "$W/llama.cpp/convert_hf_to_gguf.py" ] && break; sleep 2; done
  LLAMA_DIR="$W/llama.cpp" python3 "$ANCHOR/convert.py" "$W/models/llama8b" --outtype bf16 \
    --outfile "$W/models/llama8b.gguf" >"$W/convert.log" 2>&1 || { tail -5 "$W/convert.log"; return 1; }
  rm -rf "$W/models/llama8b"
}

run_peer() {
  # llama-server: one slot per sequence, each with 2048 tokens of context, flash attention, all layers on the GPU
  "$W/llama.cpp/build/bin/llama-server" -m "$W/models/llama8b.gguf" -ngl 99 -fa on -c $((64 * 2048)) --parallel 64 \
    -b 2048 -ub 512 --host 127.0.0.1 --port 8091 --alias llama8b >"$OUT/llama_server.log" 2>&1 &
  peer_pid=$!
  trap 'kill -9 $peer_pid ${SERVER_PID:-} 2>/dev/null' EXIT
  for _ in $(seq 1 600); do
    curl -sf http://127.0.0.1:8091/health >/dev/null 2>&1 && break
    kill -0 $peer_pid 2>/dev/null || { echo "llama-server exited:"; tail -20 "$OUT/llama_server.log"; exit 1; }
    sleep 0.5
  done
  echo "## llama.cpp llama-server (ready at $((SECONDS - t0)) s)"
  echo "$RATE_TABLE_HEAD"
  for rate in "${rates[@]}"; do
    bench_rate http://127.0.0.1:8091 "$rate" llamacpp --model llama8b --tokenizer models/default/tokenizer.json
  done
  kill $peer_pid; wait $peer_pid 2>/dev/null
}

run_drift() {
  MAX_NUM_SEQS=64 start_server "$OUT/serve.log" || exit 1
  echo "## drift serve (ready at $((SECONDS - t0)) s)"
  echo "$RATE_TABLE_HEAD"
  for rate in "${rates[@]}"; do
    bench_rate "http://127.0.0.1:$PORT" "$rate" drift
  done
  stop_server
}

( configure_build . build-gpu && ninja -C build-gpu -j4 drift >"$OUT/drift_build.log" 2>&1
  echo "drift build rc=$? at $((SECONDS - t0)) s" ) &
drift_build=$!
if [ "$MODE" != drift ]; then
  ( build_peer; echo "llama.cpp build rc=$? at $((SECONDS - t0)) s" ) &
  peer_build=$!
  make_peer_model || exit 1
  echo "peer model ready at $((SECONDS - t0)) s"
  wait $peer_build
fi
wait $drift_build
[ "$MODE" = drift ] || run_peer
[ "$MODE" = peer ] || run_drift
echo "done at $((SECONDS - t0)) s"
