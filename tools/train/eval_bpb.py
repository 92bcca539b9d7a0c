#!/usr/bin/env python3
"""Bits per byte of a causal LM on a text file, by a sliding window. Works on any Hugging Face model folder.

    python3 tools/train/eval_bpb.py --model DIR --file valid.txt [--context 512] [--stride 256]

The definition (`drift perplexity` must reproduce it exactly):

  text   = the whole file, read as UTF-8 bytes and decoded; nothing stripped or normalised.
  ids    = [bos_token_id] + tokenizer.encode(text, add_special_tokens=False)
           (tokenizer.json loaded with the `tokenizers` library; bos_token_id from config.json, or the id of
           the tokenizer's BOS token). N = len(ids). ids[0] (BOS) is never scored; ids[1..N-1] are scored once.
  windows: begin = 0, scored_from = 1; repeat:
               end = min(begin + context, N)
               run the model on ids[begin:end] (positions 0..end-begin-1, a fresh cache per window)
               for p in [scored_from, end):  nll += -log softmax(logits[p-1-begin])[ids[p]]
               if end == N: stop
               scored_from = end; begin += stride
           Requires 0 < stride < context. Every token after the first window is scored with at least
           context - stride tokens of context before it (the window start is never scored in its window).
  bpb    = nll / ln(2) / len(text.encode("utf-8"))      (nll in nats, summed over all scored tokens)
  ppl    = exp(nll / (N - 1))                           (per-token perplexity, for reference only)

Logits are computed in float32 here (bf16 weights upcast exactly); an engine that computes in bf16 with
fp32 accumulation lands within about 1e-3 relative of this number.
"""
import argparse
import json
import math
import os
import sys
import time


def window_plan(n, context, stride):
    """[(begin, end, scored_from)] as in the module docstring."""
    if not 0 < stride < context:
        raise ValueError(f"stride must be in 1..context-1, got stride={stride} context={context}")
    plan, begin, scored_from = [], 0, 1
    while True:
        end = min(begin + context, n)
        plan.append((begin, end, scored_from))
        if end >= n:
            break
        scored_from = end
        begin += stride
    return plan


def sliding_window_nll(model, ids, context=512, stride=256, batch_size=16, device="cuda"):
    """Sum of NLL (nats) over ids[1:] and the number of scored tokens. model: a causal LM returning .logits."""
    import torch
    n = len(ids)
    if n < 2:
        return 0.0, 0
    plan = window_plan(n, context, stride)
    full = [w for w in plan if w[1] - w[0] == context]
    rest = [w for w in plan if w[1] - w[0] != context]
    data = torch.tensor(ids, dtype=torch.long)
    total, count = 0.0, 0
    groups = [full[i:i + batch_size] for i in range(0, len(full), batch_size)] + [[w] for w in rest]
    model_was_training = model.training
    model.eval()
    with torch.no_grad():
        for group in groups:
            length = group[0][1] - group[0][0]
            x = torch.stack([data[b:e] for b, e, _ in group]).to(device)
            logits = model(input_ids=x, use_cache=False).logits.float()
            logp = torch.log_softmax(logits, dim=-1)
            for row, (b, e, s) in enumerate(group):
                # logits at window position j predict ids[b + j + 1]; scored ids are p in [s, e)
                pos = torch.arange(s - 1 - b, e - 1 - b, device=device)
                tgt = x[row, pos + 1]
                nll = -logp[row, pos, tgt]
                total += float(nll.double().sum())
                count += e - s
            assert length > 0
    if model_was_training:
        model.train()
    assert count == n - 1, (count, n)
    return total, count


def load_tokenizer(model_dir):
    from tokenizers import Tokenizer
    return Tokenizer.from_file(os.path.join(model_dir, "tokenizer.json"))


def bos_id(model_dir, tok):
    with open(os.path.join(model_dir, "config.json")) as f:
        cfg = json.load(f)
    bos = cfg.get("bos_token_id")
    if bos is None:
        bos = tok.token_to_id("<|begin_of_text|>")
    if bos is None:
        raise ValueError(f"{model_dir}: no bos_token_id in config.json and no <|begin_of_text|> token")
    return int(bos)


def evaluate_text(model, tok, bos, text, context=512, stride=256, batch_size=16, device="cuda"):
    import torch
    ids = [bos] + tok.encode(text, add_special_tokens=False).ids
    t0 = time.time()
    precision = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("highest")  # no TF32 in the reference
    try:
        nll, count = sliding_window_nll(model, ids, context, stride, batch_size, device)
    finally:
        torch.set_float32_matmul_precision(precision)
    nbytes = len(text.encode("utf-8"))
    return {"nll_nats": nll, "scored_tokens": count, "bytes": nbytes,
            "bpb": nll / math.log(2) / nbytes if nbytes else float("nan"),
            "loss_per_token": nll / count if count else float("nan"),
            "ppl": math.exp(nll / count) if count else float("nan"),
            "bytes_per_token": nbytes / count if count else float("nan"),
            "context": context, "stride": stride, "seconds": time.time() - t0}


def load_model(model_dir, device, dtype_name="float32"):
    import torch
    from transformers import AutoModelForCausalLM
    dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16}[dtype_name]
    try:
        model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype)
    except TypeError:  # transformers 4.x spelling
        model = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=dtype)
    return model.to(device).eval()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="Hugging Face model folder (config.json, safetensors, tokenizer.json)")
    ap.add_argument("--file", required=True, help="UTF-8 text file")
    ap.add_argument("--context", type=int, default=512)
    ap.add_argument("--stride", type=int, default=256)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    ap.add_argument("--device", default=None)
    ap.add_argument("--json", default=None, help="also write the result here")
    args = ap.parse_args()
    import torch
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    with open(args.file, "rb") as f:
        text = f.read().decode("utf-8")
    tok = load_tokenizer(args.model)
    model = load_model(args.model, device, args.dtype)
    res = evaluate_text(model, tok, bos_id(args.model, tok), text, args.context, args.stride, args.batch_size, device)
    res.update({"model": args.model, "file": args.file, "dtype": args.dtype})
    print(json.dumps(res, indent=1))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
