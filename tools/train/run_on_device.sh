#!/usr/bin/env bash
# The command for the GPU machine (one H100; keeps nothing between calls; returns at most 8 files of at
# most 16 MB each from $OUT). Run from the repository root with the corpus carried along:
#
#   bash tools/train/run_on_device.sh smoke              # ~2 min: whole pipeline, tiny models, 20 steps
#   bash tools/train/run_on_device.sh tokenizer          # ~1 min: trains the tokenizer -> $OUT/tokenizer.json
#   bash tools/train/run_on_device.sh llama [ARGS...]    # one training run of ~9 min -> $OUT/llama.tar.gz.part*
#   bash tools/train/run_on_device.sh mla   [ARGS...]    # the same for the MLA model
#   bash tools/train/run_on_device.sh chat  [ARGS...]    # ~1 min smoke, then ~7 min chat-tuning of the llama
#                                                        # model -> $OUT/chat.tar.gz.part* (chat_tune.py)
#   bash tools/train/run_on_device.sh eagle3 [ARGS...]   # ~1 min smoke, then ~7.5 min: EAGLE-3 head for
#                                                        # models/drift-chat-15m -> $OUT/eagle3.tar.gz (eagle3_train.py)
#   bash tools/train/run_on_device.sh longctx [ARGS...]  # ~1 min smoke of both, ~4 min long-context training of
#                                                        # models/drift-chat-15m (long_context.py, ARGS go there),
#                                                        # ~3.5 min its EAGLE-3 head retrained from the current one
#                                                        # -> $OUT/longctx.tar.gz.part* (the folder, eagle3/ inside),
#                                                        # $OUT/longctx.log (all of it)
#
# ARGS go to train.py (e.g. --compile, --lr 2e-3, --batch-size 96). The step runs under `timeout 560` so the
# tarball is still written when Python overruns. The HF folder comes back as a .tar.gz split into 15 MB
# parts: reassemble with  cat llama.tar.gz.part* | tar -xzf -
# The resume checkpoint (fp32 weights + Adam moments, ~12 bytes/parameter) stays on the device and is lost
# when the machine is returned; each model therefore trains in one run (see README.md).
set -uo pipefail
cd "$(dirname "$0")/../.."
STEP="${1:-}"; shift || true
OUT="${OUT:-/tmp/drift-train-out}"
WORK="${DRIFT_TRAIN_WORK:-/tmp/drift-train}"
CORPUS="${DRIFT_CORPUS:-.corpus}"
mkdir -p "$OUT" "$WORK"
export PYTHONUNBUFFERED=1

{
  date -u
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || true
  python3 -c 'import torch, transformers, tokenizers, safetensors, numpy; print("torch", torch.__version__, "cuda", torch.version.cuda, "transformers", transformers.__version__, "tokenizers", tokenizers.__version__, "numpy", numpy.__version__)'
  ls -l "$CORPUS" 2>/dev/null || echo "WARNING: no corpus at $CORPUS (carry .corpus with the working tree)"
  git log -1 --format='commit %H %s' 2>/dev/null || true
} > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"

pack() {  # pack FOLDER NAME: FOLDER -> $OUT/NAME.tar.gz.part0, part1, ... (15 MB each)
  local dir="$1" name="$2"
  if [ ! -d "$dir" ]; then echo "nothing to pack: $dir missing"; return 1; fi
  tar -C "$(dirname "$dir")" -czf "/tmp/$name.tar.gz" "$(basename "$dir")"
  split -b 15m -d -a 1 "/tmp/$name.tar.gz" "$OUT/$name.tar.gz.part"
  (cd "$OUT" && sha256sum "/tmp/$name.tar.gz" | sed "s|/tmp/||" > "$name.tar.gz.sha256")
  ls -l "$OUT"
}

rc=0
case "$STEP" in
  smoke)
    timeout 560 python3 tools/train/smoke_test.py --work /tmp/drift-smoke --corpus "$CORPUS" "$@" 2>&1 | tee "$OUT/smoke.log"
    rc=${PIPESTATUS[0]}
    cp /tmp/drift-smoke/*.log "$OUT/" 2>/dev/null || true
    # the tiny models are useful as engine fixtures: bring them back too (a few MB)
    tar -C /tmp/drift-smoke -czf "$OUT/smoke-models.tar.gz" hf 2>/dev/null || true
    ;;
  tokenizer)
    timeout 560 python3 tools/train/train.py --tokenizer-only --retrain-tokenizer --corpus "$CORPUS" --work "$WORK" "$@" 2>&1 | tee "$OUT/tokenizer.log"
    rc=${PIPESTATUS[0]}
    cp "$WORK/tokenizer.json" "$OUT/tokenizer.json" 2>/dev/null || rc=1
    ;;
  llama|mla)
    timeout 560 python3 tools/train/train.py --arch "$STEP" --corpus "$CORPUS" --work "$WORK" --minutes 8.75 "$@" 2>&1 | tee "$OUT/$STEP.log"
    rc=${PIPESTATUS[0]}
    [ "$rc" = 124 ] && echo "train.py was stopped by timeout 560; packing whatever was written"
    pack "$WORK/hf/$STEP" "$STEP" || rc=1
    cp "$WORK/tokenizer.json" "$OUT/tokenizer.json" 2>/dev/null || true
    ;;
  chat)
    BASE=${DRIFT_CHAT_BASE:-models/drift-llama-15m}  # not in the tree since the chat model replaced it:
    [ -f "$BASE/model.safetensors" ] || { echo "no base model at $BASE: git checkout c07c715 -- models/drift-llama-15m"; exit 2; }
    timeout 150 python3 tools/train/chat_tune.py --base "$BASE" --corpus "$CORPUS" --work "$WORK" --out /tmp/drift-chat-smoke \
      --max-steps 20 --max-dialogues 2000 --valid-max-bytes 20000 --eval-every-seconds 5 --reserve-seconds 0 \
      2>&1 | tee "$OUT/chat-smoke.log"
    rc=${PIPESTATUS[0]}
    if [ "$rc" = 0 ]; then
      timeout 450 python3 tools/train/chat_tune.py --base "$BASE" --corpus "$CORPUS" --work "$WORK" --minutes 7 "$@" \
        2>&1 | tee "$OUT/chat.log"
      rc=${PIPESTATUS[0]}
      pack "$WORK/hf/chat" chat || rc=1
    fi
    ;;
  eagle3)
    # smoke (tiny budgets: a few prompts generated, 20 steps, save, reload, 5 prompts evaluated), then the real
    # run in what is left of 540 s; the head folder comes back as $OUT/eagle3.tar.gz (-> models/drift-chat-15m/eagle3/)
    TARGET=${DRIFT_EAGLE3_TARGET:-models/drift-chat-15m}
    t0=$SECONDS
    timeout 150 python3 tools/train/eagle3_train.py --target "$TARGET" --corpus "$CORPUS" \
      --out /tmp/drift-eagle3-smoke/eagle3 --minutes 2 --gen-minutes 0.25 --reserve-seconds 5 --pool 512 \
      --gen-batch 64 --min-new 32 --max-new 64 --holdout-every 4 --max-steps 20 --eval-prompts 5 \
      --eval-every-seconds 1000 --sequential-checks 2 2>&1 | tee "$OUT/eagle3-smoke.log"
    rc=${PIPESTATUS[0]}
    if [ "$rc" = 0 ] && [ -f /tmp/drift-eagle3-smoke/eagle3/model.safetensors ]; then
      echo "EAGLE3 SMOKE OK ($((SECONDS - t0)) s)"
      left=$((540 - (SECONDS - t0)))
      minutes=$(python3 -c "print(round(min(7.5, ($left - 30) / 60.0), 2))")
      echo "real run: --minutes $minutes under timeout $left"
      rm -rf "$WORK/eagle3"
      timeout "$left" python3 tools/train/eagle3_train.py --target "$TARGET" --corpus "$CORPUS" \
        --out "$WORK/eagle3/eagle3" --minutes "$minutes" "$@" 2>&1 | tee "$OUT/eagle3.log"
      rc=${PIPESTATUS[0]}
      [ "$rc" = 124 ] && echo "eagle3_train.py was stopped by timeout $left; packing whatever was written"
      if [ -f "$WORK/eagle3/eagle3/model.safetensors" ]; then
        tar -C "$WORK/eagle3" -czf "$OUT/eagle3.tar.gz" eagle3
        (cd "$OUT" && sha256sum eagle3.tar.gz > eagle3.tar.gz.sha256)
        cp "$WORK/eagle3/eagle3/training.json" "$OUT/eagle3-training.json" 2>/dev/null || true
        ls -l "$OUT"
      else
        echo "no head folder at $WORK/eagle3/eagle3"; rc=1
      fi
    else
      echo "EAGLE3 SMOKE FAILED (exit $rc): the real run is skipped"; [ "$rc" = 0 ] && rc=1
    fi
    ;;
  longctx)
    # One call of at most ~9.5 min (the machine stops commands at 600 s): smokes of long_context.py and
    # eagle3_train.py at toy sizes (the first builds the corpus token cache both real runs reuse), then the
    # long-context training (4096 tokens) of models/drift-chat-15m, then its EAGLE-3 head retrained on the new
    # model from the current head, written into the new folder as eagle3/. Each phase runs under `timeout`, so the
    # packing still happens. Everything is logged to $OUT/longctx.log (the device returns at most 8 files).
    BASE=${DRIFT_LONGCTX_BASE:-models/drift-chat-15m}
    NEW="$WORK/hf/longctx"
    LOG="$OUT/longctx.log"
    t0=$SECONDS
    timeout 100 python3 tools/train/long_context.py --base "$BASE" --corpus "$CORPUS" --work "$WORK" \
      --out /tmp/drift-longctx-smoke --seq-len 1024 --batch-size 2 --chat-batch-size 8 --max-steps 3 --minutes 3 \
      --reserve-seconds 0 --max-dialogues 2000 --valid-max-bytes 20000 --eval-windows 4 --quick-windows 2 \
      --questions 2 --eval-every-seconds 1000 2>&1 | tee -a "$LOG"
    rc=${PIPESTATUS[0]}
    if [ "$rc" = 0 ]; then
      timeout 100 python3 tools/train/eagle3_train.py --target "$BASE" --init-head "$BASE/eagle3" --eval-init \
        --corpus "$CORPUS" --work "$WORK" --out /tmp/drift-eagle3-smoke/eagle3 --minutes 1.5 --gen-minutes 0.1 \
        --reserve-seconds 5 --pool 512 --gen-batch 64 --min-new 32 --max-new 64 --max-len 1024 --long-share 0.3 \
        --holdout-every 4 --max-steps 10 --eval-prompts 6 --eval-every-seconds 1000 --sequential-checks 2 \
        2>&1 | tee -a "$LOG"
      rc=${PIPESTATUS[0]}
    fi
    if [ "$rc" = 0 ] && [ -f /tmp/drift-longctx-smoke/model.safetensors ] && \
       [ -f /tmp/drift-eagle3-smoke/eagle3/model.safetensors ]; then
      echo "LONGCTX SMOKE OK ($((SECONDS - t0)) s)" | tee -a "$LOG"
      left=$((550 - (SECONDS - t0)))          # seconds the two runs share; packing takes ~10 s after them
      lc=$(( left - 215 < 240 ? left - 215 : 240 ))
      lc_min=$(python3 -c "print(round($lc / 60.0, 2))")
      echo "long_context.py: --minutes $lc_min under timeout $((lc + 15))" | tee -a "$LOG"
      rm -rf "$NEW"
      timeout $((lc + 15)) python3 tools/train/long_context.py --base "$BASE" --corpus "$CORPUS" --work "$WORK" \
        --out "$NEW" --minutes "$lc_min" "$@" 2>&1 | tee -a "$LOG"
      rc=${PIPESTATUS[0]}
      [ "$rc" = 124 ] && echo "long_context.py was stopped by timeout; using what it wrote" | tee -a "$LOG"
      if [ -f "$NEW/model.safetensors" ]; then
        ea=$(( 550 - (SECONDS - t0) - 10 ))
        ea=$(( ea < 225 ? ea : 225 ))
        ea_min=$(python3 -c "print(round($ea / 60.0, 2))")
        echo "eagle3_train.py: --minutes $ea_min under timeout $((ea + 10))" | tee -a "$LOG"
        timeout $((ea + 10)) python3 tools/train/eagle3_train.py --target "$NEW" --init-head "$BASE/eagle3" \
          --eval-init --corpus "$CORPUS" --work "$WORK" --out "$NEW/eagle3" --minutes "$ea_min" --gen-minutes 1 \
          --max-len 4096 --long-share 0.3 --lr 3e-4 --warmup-steps 30 --reserve-seconds 55 2>&1 | tee -a "$LOG"
        rc2=${PIPESTATUS[0]}
        [ "$rc2" = 124 ] && echo "eagle3_train.py was stopped by timeout" | tee -a "$LOG"
        [ "$rc" = 0 ] && rc=$rc2
        [ -f "$NEW/eagle3/model.safetensors" ] || { echo "no head at $NEW/eagle3" | tee -a "$LOG"; rm -rf "$NEW/eagle3"; }
      else
        echo "no model at $NEW" | tee -a "$LOG"; [ "$rc" = 0 ] && rc=1
      fi
      pack "$NEW" longctx 2>&1 | tee -a "$LOG" || rc=1
    else
      echo "LONGCTX SMOKE FAILED (exit $rc): the real runs are skipped" | tee -a "$LOG"; [ "$rc" = 0 ] && rc=1
    fi
    echo "longctx: $((SECONDS - t0)) s" | tee -a "$LOG"
    ;;
  *)
    echo "usage: bash tools/train/run_on_device.sh {smoke|tokenizer|llama|mla|chat|eagle3|longctx} [script args]" >&2
    exit 2
    ;;
esac
echo "exit $rc"
exit $rc
