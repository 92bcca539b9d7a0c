#!/usr/bin/env bash
# The streaming GEMV (CudaOptions::gemv_stream, ops/gemv_stream.cu) on its first GPU: linear_test (every case
# through both GEMVs against the CPU), then batch-1 forward steps from a graph with it off and on
# (drift_bench_decode --ablate: its last row) on the Llama and GPT-OSS shapes.
#   bash tools/gpu/gemv_stream_checks.sh [shape ...]   (the run tool: carry [".gpu-sysroot.tar.xz"]); logs in $OUT
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/drift-gpu-out}
mkdir -p "$OUT"
[ $# -eq 0 ] && set -- llama-3.2-1b llama-3.1-8b gpt-oss-20b
. tools/gpu/setup.sh
configure_build . build-gpu -DDRIFT_TESTS=ON -DDRIFT_BENCH=ON -DDRIFT_PYTHON=OFF || exit 1
ninja -C build-gpu -j16 cuda_ops_test drift_bench_decode > "$OUT/build.log" 2>&1 || { grep -E "error" "$OUT/build.log" | head; exit 1; }
build-gpu/tests/ops/cuda_ops_test --gtest_filter='Linear*' > "$OUT/linear.log" 2>&1
echo "linear_test rc=$?"; grep -E "^\[  (PASSED|FAILED) |Failure|streaming" "$OUT/linear.log" | head -8
for shape in "$@"; do
  timeout 150 build-gpu/bench/decode/drift_bench_decode --model "$shape" --batch 1 --prefill 16 --ablate true \
    --markdown "$OUT/ablate_$shape.md" > "$OUT/ablate_$shape.log" 2>&1
  echo "$shape rc=$?"; grep -E "forward, graph" "$OUT/ablate_$shape.md" | head -8
done
