#!/usr/bin/env bash
# The one command sent to the GPU machine for the CUDA backend: unpack the Debian build dependencies
# carried in .debs/ into a sysroot (the GPU image has nvcc, cmake and ninja but none of Drift's -dev
# packages), configure for sm_90a, build the CUDA targets, run the CUDA op tests (sampler included), the
# CUDA golden model tests and the engine test, compare `drift generate` on CUDA with the CPU, run the
# decode benchmark, and print a short table last. Logs go to $OUT.
#
# Here, once:   mkdir -p .debs && (cd .debs && apt-get download $(grep -v "^#" ../tools/gpu/debs.txt))
# There:        tools/gpu/run_cuda_checks.sh [all|test|bench] [drift_bench_decode arguments...]
#               (the run tool: carry [".debs"]). BENCH_DEADLINE (seconds since start, default 315) cuts
#               the benchmark short so that the summary still prints inside the call's limit.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/drift-gpu-out}
mkdir -p "$OUT"
MODE=${1:-all}
[ $# -gt 0 ] && shift
BUILD=build-gpu
BENCH_DEADLINE=${BENCH_DEADLINE:-315}
t_start=$SECONDS
. tools/gpu/setup.sh

{
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm,clocks.mem --format=csv
  "$NVCC" --version | tail -2
  g++ --version | head -1
  cmake --version | head -1
  echo "pkg-config: $PKGCONF; cores: $(nproc)"
} 2>&1 | tee "$OUT/build.log"

configure_build . "$BUILD" -DDRIFT_TESTS=ON -DDRIFT_BENCH=ON || exit 1
grep -E "drift:|HTTPLIB|cpp-httplib" /tmp/drift-configure.log >>"$OUT/build.log" 2>/dev/null
# One ninja run for everything (-k 0: a target that fails, such as drift without cpp-httplib, does not
# stop the others).
ninja -C "$BUILD" -j16 -k 0 cuda_ops_test cuda_models_test cuda_engine_test cli_test models_test drift_bench_decode drift \
  >>"$OUT/build.log" 2>&1
build_rc=$?
echo "build rc=$build_rc after $((SECONDS - t_start)) s"
[ $build_rc -ne 0 ] && grep -E "error|FAILED" "$OUT/build.log" | head -30

ops_rc=skip models_rc=skip engine_rc=skip cli_rc=skip generate=skip bench_rc=skip
if [ "$MODE" = all ] || [ "$MODE" = test ]; then
  for t in ops/cuda_ops_test models/cuda_models_test ops/cuda_engine_test cli/cli_test; do
    name=$(basename "$t")
    [ -x "$BUILD/tests/$t" ] || continue
    timeout 120 "$BUILD/tests/$t" >"$OUT/$name.log" 2>&1
    rc=$?
    case $name in
      cuda_ops_test) ops_rc=$rc ;;
      cuda_models_test) models_rc=$rc ;;
      cuda_engine_test) engine_rc=$rc ;;
      cli_test) cli_rc=$rc ;;
    esac
  done
  echo "tests done after $((SECONDS - t_start)) s"
  # drift generate, greedy, on the llama fixture: the CUDA token ids against the CPU's.
  DRIFT=$BUILD/apps/drift/drift
  if [ -x "$DRIFT" ]; then
    for dev in cpu cuda; do
      timeout 60 "$DRIFT" generate -m tests/fixtures/models/llama --device "$dev" -p "Once upon a time" \
        --max-tokens 16 --ignore-eos --output json >"/tmp/generate_$dev.json" 2>"/tmp/generate_$dev.err"
      { echo "== $dev (rc=$?)"; cat "/tmp/generate_$dev.json" "/tmp/generate_$dev.err"; } >>"$OUT/generate.txt"
    done
    generate=$(python3 - /tmp/generate_cpu.json /tmp/generate_cuda.json <<'PY' 2>&1
import json, sys
def ids(path):
    line = next(l for l in open(path) if l.startswith("{"))
    return json.loads(line)["generated_token_ids"]
cpu, cuda = ids(sys.argv[1]), ids(sys.argv[2])
first = next((i for i, (a, b) in enumerate(zip(cpu, cuda)) if a != b), None)
print(("identical" if first is None and len(cpu) == len(cuda) else f"part at step {first}") +
      f"; cpu {cpu}; cuda {cuda}")
PY
)
  else
    generate="drift binary not built"
  fi
fi
if { [ "$MODE" = all ] || [ "$MODE" = bench ]; } && [ -x "$BUILD/bench/decode/drift_bench_decode" ]; then
  left=$((BENCH_DEADLINE - (SECONDS - t_start)))
  [ $left -lt 30 ] && left=30
  timeout "$left" "$BUILD/bench/decode/drift_bench_decode" --markdown "$OUT/bench.md" "$@" >"$OUT/bench.log" 2>&1
  bench_rc=$?
  echo "bench done after $((SECONDS - t_start)) s (limit $left s)"
fi

# The short table, last.
echo
echo "== failures (first lines) =="
grep -hA4 "Failure$" "$OUT"/cuda_*_test.log "$OUT"/cli_test.log 2>/dev/null | head -50
grep -hE "check failed|CUDA error|illegal|cuda_call_failed" "$OUT"/*.log 2>/dev/null | head -5
echo "== golden logit errors, engine and sampler notes =="
grep -h "max error" "$OUT/cuda_models_test.log" 2>/dev/null | head -8
grep -h "^\[ engine   \]\|^\[ sampler  \]" "$OUT"/cuda_*_test.log 2>/dev/null | head -16
grep -h "replayed from a graph" "$OUT/bench.log" 2>/dev/null | head -12
echo
echo "== summary ($((SECONDS - t_start)) s) =="
echo "build: rc=$build_rc"
echo "cuda_ops_test (rc=$ops_rc): $(summary "$OUT/cuda_ops_test.log")"
echo "cuda_models_test (rc=$models_rc): $(summary "$OUT/cuda_models_test.log")"
echo "cuda_engine_test (rc=$engine_rc): $(summary "$OUT/cuda_engine_test.log")"
echo "cli_test (rc=$cli_rc): $(summary "$OUT/cli_test.log")"
echo "drift generate cuda vs cpu: $generate"
echo "bench (rc=$bench_rc):"
if [ -f "$OUT/bench.md" ]; then cat "$OUT/bench.md"; else tail -15 "$OUT/bench.log" 2>/dev/null; fi
