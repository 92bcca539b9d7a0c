#!/usr/bin/env bash
# Overlapped scheduling on the GPU (issue 17): builds the CUDA targets, runs the CUDA op, model and engine
# tests, then decode through the whole Engine (drift_bench_engine) with overlap off and on beside decode
# through the runner alone (drift_bench_decode), at the Llama-3.2-1B and Llama-3.1-8B shapes.
#   bash tools/gpu/overlap_checks.sh [tests|bench|all]  (the run tool: carry [".gpu-sysroot.tar.xz"]); logs in $OUT
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/drift-gpu-out}
MODE=${1:-all}
mkdir -p "$OUT"
. tools/gpu/setup.sh
t0=$SECONDS
configure_build . build-gpu -DDRIFT_TESTS=ON -DDRIFT_BENCH=ON -DDRIFT_PYTHON=OFF || exit 1
ninja -C build-gpu -j16 cuda_ops_test cuda_models_test cuda_engine_test drift_bench_engine drift_bench_decode > "$OUT/build.log" 2>&1 ||
  { grep -E "error" "$OUT/build.log" | head -20; exit 1; }
echo "built after $((SECONDS - t0)) s"
if [ "$MODE" != bench ]; then
  for t in ops/cuda_ops_test models/cuda_models_test ops/cuda_engine_test; do
    timeout 240 "build-gpu/tests/$t" > "$OUT/$(basename $t).log" 2>&1
    echo "$(basename $t) rc=$?: $(summary "$OUT/$(basename $t).log")"
  done
  grep -hA6 "Failure$" "$OUT"/cuda_*_test.log | head -40
  echo "tests done after $((SECONDS - t0)) s"
fi
[ "$MODE" = tests ] && exit 0
make_shape() {  # name hidden intermediate layers heads kv_heads head_dim tied -> folder (decode_bench.cc's shapes)
  local dir=/tmp/drift-shape-$1
  mkdir -p "$dir"
  cp models/default/tokenizer.json models/default/tokenizer_config.json "$dir/"
  cat > "$dir/config.json" <<JSON
{"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": $2, "intermediate_size": $3,
 "num_hidden_layers": $4, "num_attention_heads": $5, "num_key_value_heads": $6, "head_dim": $7,
 "vocab_size": 128256, "max_position_embeddings": 8192, "rms_norm_eps": 1e-5, "rope_theta": 500000.0,
 "tie_word_embeddings": $8, "torch_dtype": "bfloat16", "bos_token_id": 1, "eos_token_id": 2}
JSON
  echo "$dir"
}
for shape in "llama-3.2-1b 2048 8192 16 32 8 64 true" "llama-3.1-8b 4096 14336 32 32 8 128 false"; do
  set -- $shape
  echo "== $1 through the Engine (prompt 512, 128 generated)"
  timeout 200 build-gpu/bench/engine/drift_bench_engine -m "$(make_shape "$@")" --random-weights --device cuda \
    --batch 1 16 64 --overlap off on 2> "$OUT/engine_$1.err" | tee "$OUT/engine_$1.md"
  tail -3 "$OUT/engine_$1.err"
done
echo "== through the runner alone"
timeout 200 build-gpu/bench/decode/drift_bench_decode --model llama-3.2-1b llama-3.1-8b --batch 1 16 64 --prefill 512 \
  --markdown "$OUT/runner.md" > "$OUT/runner.log" 2>&1
cat "$OUT/runner.md" 2>/dev/null || tail -20 "$OUT/runner.log"
echo "all done after $((SECONDS - t0)) s"
