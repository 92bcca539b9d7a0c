#!/usr/bin/env bash
# MLA's expanded prefill and the MLA kernel table (issue 13), in one call: the MLA, gather and expanded-
# prefill op tests against the CPU, the MLA fixtures' CUDA goldens (their 88-token prompts and 40-token
# chunks run expanded), drift_bench_mla (graph-timed, rotating over disjoint caches), then prefill in both
# forms and decode on Youtu-LLM-2B, and, with MODELS=deepseek-v2-lite (its random weights load in ~3 min),
# the issue's DeepSeek-V2-Lite table.
#   bash tools/gpu/mla_prefill_checks.sh [all|test|kernel|models]   (the run tool: carry [".gpu-sysroot.tar.xz"])
# Logs and tables go to $OUT; a short summary prints last.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/drift-gpu-out}
mkdir -p "$OUT"
MODE=${1:-all}
MODELS=${MODELS:-youtu-llm-2b}
PREFILLS=${PREFILLS:-"32 64 128 512 4096"}
BUILD=build-gpu
t_start=$SECONDS
. tools/gpu/setup.sh
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv >"$OUT/build.log" 2>&1
configure_build . "$BUILD" -DDRIFT_TESTS=ON -DDRIFT_BENCH=ON -DDRIFT_PYTHON=OFF || exit 1
ninja -C "$BUILD" -j16 -k 0 cuda_ops_test cuda_models_test drift_bench_decode drift_bench_mla >>"$OUT/build.log" 2>&1
build_rc=$?
echo "build rc=$build_rc after $((SECONDS - t_start)) s"
[ $build_rc -ne 0 ] && grep -E "error|FAILED" "$OUT/build.log" | head -30

wants() { [ "$MODE" = all ] || [[ ",$MODE," == *",$1,"* ]]; }

if wants test; then
  timeout 150 "$BUILD/tests/ops/cuda_ops_test" --gtest_filter='*Mla*:*Gather*:*Prefill*' >"$OUT/cuda_ops_test.log" 2>&1
  echo "cuda_ops_test rc=$?: $(summary "$OUT/cuda_ops_test.log")"
  timeout 150 "$BUILD/tests/models/cuda_models_test" --gtest_filter='*deepseek*:*youtu*' >"$OUT/cuda_models_test.log" 2>&1
  echo "cuda_models_test rc=$?: $(summary "$OUT/cuda_models_test.log")"
fi
if wants kernel; then
  timeout 150 "$BUILD/bench/decode/drift_bench_mla" --heads 16 --batch 1 16 64 --context 1024 4096 32768 \
    --markdown "$OUT/mla16.md" >"$OUT/mla16.log" 2>&1
  timeout 90 "$BUILD/bench/decode/drift_bench_mla" --heads 128 --batch 1 64 --context 4096 32768 \
    --markdown "$OUT/mla128.md" >"$OUT/mla128.log" 2>&1
  cat "$OUT/mla16.md" "$OUT/mla128.md" 2>/dev/null | grep -E "^\|"
fi
if wants models; then
  for m in $MODELS; do
    timeout $((590 - (SECONDS - t_start))) "$BUILD/bench/decode/drift_bench_decode" --model "$m" --batch 1 64 \
      --prefill $PREFILLS --mla-prefill true --forward-only false --eager false --markdown "$OUT/decode_$m.md" \
      >"$OUT/decode_$m.log" 2>&1
    echo "drift_bench_decode $m rc=$?"
    grep -E "^\|" "$OUT/decode_$m.md" 2>/dev/null
  done
fi
tar -C "$OUT" -czf "$OUT/logs.tgz" --exclude=logs.tgz . 2>/dev/null
echo "done after $((SECONDS - t_start)) s"
