#!/usr/bin/env bash
# MLA latent attention after a kernel change (issues 13, 16): the MLA/DSA op tests, the MLA fixtures' CUDA
# goldens, and drift_bench_mla at 16 and 128 heads, batch 1 and 64, contexts 4k and 32k, bf16 then FP8
# latents, batch 1 under several caps on the key splits, then MLA-lite's 32 heads over a 416-value row (the
# Llama-3.1-8B retrofit, block 16) at batch 1 and 64, contexts 8k and 32k.
#   bash tools/gpu/mla_kernel_checks.sh   (the run tool: carry [".gpu-sysroot.tar.xz"]); logs and tables in $OUT
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/drift-gpu-out}
mkdir -p "$OUT"
. tools/gpu/setup.sh
configure_build . build-gpu -DDRIFT_TESTS=ON -DDRIFT_BENCH=ON -DDRIFT_PYTHON=OFF || exit 1
ninja -C build-gpu -j16 cuda_ops_test cuda_models_test drift_bench_mla > $OUT/build.log 2>&1 || { grep -E "error" $OUT/build.log | head; exit 1; }
build-gpu/tests/ops/cuda_ops_test --gtest_filter='*Mla*:*Dsa*:*Sparse*' > $OUT/ops.log 2>&1; echo "ops rc=$?"; grep -E "PASSED|FAILED" $OUT/ops.log | head -5
build-gpu/tests/models/cuda_models_test --gtest_filter='*deepseek*:*youtu*' > $OUT/models.log 2>&1; echo "models rc=$?"; grep -E "PASSED|FAILED" $OUT/models.log | head -5
for f in false true; do build-gpu/bench/decode/drift_bench_mla --heads 16 128 --batch 1 64 --context 4096 32768 --fp8 $f --markdown $OUT/mla_$f.md > $OUT/mla_$f.log 2>&1; grep -E "^\|" $OUT/mla_$f.md; done
# Where the split rule should stop at batch 1: the same rows under several caps on the key splits.
build-gpu/bench/decode/drift_bench_mla --heads 16 --batch 1 --context 4096 32768 --max-splits 0 32 64 132 256 \
  --markdown $OUT/mla_splits.md > $OUT/mla_splits.log 2>&1; grep -E "^\|" $OUT/mla_splits.md
build-gpu/bench/decode/drift_bench_mla --heads 32 --batch 1 64 --context 8192 32768 --width 416 --dv 384 --block-size 16 \
  --markdown $OUT/mla_lite.md > $OUT/mla_lite.log 2>&1; grep -E "^\|" $OUT/mla_lite.md
