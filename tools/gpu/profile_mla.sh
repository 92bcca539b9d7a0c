#!/usr/bin/env bash
# Nsight Compute on MLA decode attention alone (issue 13): one launch of the tensor-core latent kernel from
# drift_bench_mla at the given shape, its speed of light, occupancy, warp stall reasons and memory tables
# printed as text. At the GPU's own clocks (--clock-control none) and without cache flushes, as
# profile_decode.sh does.
#   bash tools/gpu/profile_mla.sh [heads] [batch] [context] [extra bench args...]   (the run tool: carry
#   [".gpu-sysroot.tar.xz"])
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/drift-gpu-out}
mkdir -p "$OUT"
HEADS=${1:-16} BATCH=${2:-64} CONTEXT=${3:-4096}
shift 3 2>/dev/null || shift $#
BUILD=build-gpu
. tools/gpu/setup.sh
configure_build . "$BUILD" -DDRIFT_TESTS=OFF -DDRIFT_BENCH=ON -DDRIFT_PYTHON=OFF || exit 1
ninja -C "$BUILD" -j16 drift_bench_mla >"$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
"$NCU" --clock-control none --cache-control none --kernel-name regex:mla_mma --launch-skip 8 --launch-count 1 \
  --section SpeedOfLight --section Occupancy --section WarpStateStats --section LaunchStats \
  --section MemoryWorkloadAnalysis --section SchedulerStats --section ComputeWorkloadAnalysis \
  "$BUILD/bench/decode/drift_bench_mla" --heads "$HEADS" --batch "$BATCH" --context "$CONTEXT" "$@" \
  >"$OUT/ncu_mla.txt" 2>&1
echo "ncu rc=$?"
grep -vE "^==PROF==|^heads " "$OUT/ncu_mla.txt" | grep -E "^\s+[A-Z]|----|Section|mla_mma|OPT|WRN" | head -150
