#!/usr/bin/env bash
# The retrofit sweep on the GPU machine (one H100, ~9 min): SVD init, Strategy-B training of only the new
# weights, bits/byte on the corpus's valid.txt for d_c in {112, 48} (2x, 4x smaller KV with one shared
# RoPE key of 8 frequencies, a rank-128 query adapter), DSA-lite at k in {64, 32, 128} of 512, and both together (tools/gpu/retrofit_checks.sh
# sweep runs several configurations side by side instead). Run from the repository root
# with the corpus carried along (carry: [".corpus"]):
#
#   bash tools/retrofit/run_on_device.sh [retrofit.py ARGS...]
#
# $OUT gets: retrofit.log (the table at its end), results.json, retrofits.tar.gz (one safetensors file per
# configuration, for `drift perplexity --retrofit FILE` and `drift inspect --retrofit FILE` here), env.txt.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT="${OUT:-/tmp/drift-retrofit-out}"
WORK="${DRIFT_RETROFIT_WORK:-/tmp/drift-retrofit}"
CORPUS="${DRIFT_CORPUS:-.corpus}"
MODEL="${DRIFT_RETROFIT_MODEL:-models/default}"
mkdir -p "$OUT" "$WORK"
export PYTHONUNBUFFERED=1
{
  date -u
  nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>/dev/null || true
  python3 -c 'import torch, tokenizers; print("torch", torch.__version__, "cuda", torch.version.cuda, "tokenizers", tokenizers.__version__)'
  ls -l "$CORPUS" 2>/dev/null || echo "WARNING: no corpus at $CORPUS (carry .corpus with the working tree)"
  git log -1 --format='commit %H %s' 2>/dev/null || true
} > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"

timeout 560 python3 tools/retrofit/retrofit.py --model "$MODEL" --corpus "$CORPUS" --out "$WORK" "$@" 2>&1 | tee "$OUT/retrofit.log"
rc=${PIPESTATUS[0]}
[ "$rc" = 124 ] && echo "retrofit.py was stopped by timeout 560; returning what was written"
cp "$WORK/results.json" "$OUT/" 2>/dev/null || true
tar -C "$WORK" -czf "$OUT/retrofits.tar.gz" $(cd "$WORK" && ls *.safetensors 2>/dev/null) 2>/dev/null || true
ls -l "$OUT"
echo "exit $rc"
exit $rc
