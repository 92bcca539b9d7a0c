#!/usr/bin/env bash
# A/B of the decode benchmark on the GPU machine: a base commit against the working tree, built and run in
# one call on the same GPU, alternating base/new ROUNDS times so that drift in the GPU's clocks falls on both.
# Here:    mkdir -p .ab && git archive BASE CMakeLists.txt cmake include src apps bench tools | gzip > .ab/base.tar.gz
# There:   tools/gpu/ab_bench.sh [drift_bench_decode arguments...]   (carry [".debs", ".ab"]); ROUNDS (2);
#          NEW_BUILD (build-ab): a build folder of the working tree to reuse, such as one the tests were built in;
#          TAG: a prefix for the output files, so that two runs in one call keep both tables.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/drift-gpu-out}
ROUNDS=${ROUNDS:-2}
NEW_BUILD=${NEW_BUILD:-build-ab}
mkdir -p "$OUT" /tmp/drift-base
. tools/gpu/setup.sh
tar -xzf .ab/base.tar.gz -C /tmp/drift-base || { echo "no .ab/base.tar.gz"; exit 1; }
configure_build /tmp/drift-base /tmp/build-base -DDRIFT_TESTS=OFF -DDRIFT_BENCH=ON || exit 1
configure_build . "$NEW_BUILD" -DDRIFT_TESTS=OFF -DDRIFT_BENCH=ON || exit 1
ninja -C /tmp/build-base -j16 drift_bench_decode >"$OUT/build-base.log" 2>&1 || { tail -20 "$OUT/build-base.log"; exit 1; }
ninja -C "$NEW_BUILD" -j16 drift_bench_decode >"$OUT/build-new.log" 2>&1 || { tail -20 "$OUT/build-new.log"; exit 1; }
for round in $(seq 1 "$ROUNDS"); do
  for side in base new; do
    bin=/tmp/build-base/bench/decode/drift_bench_decode
    [ "$side" = new ] && bin=$NEW_BUILD/bench/decode/drift_bench_decode
    out=$OUT/${TAG:+$TAG-}$side-$round
    "$bin" --markdown "$out.md" "$@" >"$out.log" 2>&1
    echo "== $side, round $round (rc=$?)"
    grep -E "^\| " "$out.md" | cut -d'|' -f2-5
  done
done
