#!/usr/bin/env python3
"""MLA-lite and DSA-lite retrofits of a Hugging Face GQA model (issue 16), Strategy B: the backbone stays
frozen and only the new weights train.

    python3 tools/retrofit/retrofit.py --model models/default --corpus .corpus --out OUT \\
        [--ranks 112,48] [--freqs 8] [--q-rank 128] [--no-k-rope] [--no-shared-rope] [--top-ks 64,32,128] [--index-heads 4 --index-dim 32] \\
        [--mla-seconds 150 --index-seconds 120 --both-seconds 100] [--resume FILE,...] [--dsa-oracle]

For each rank d_c: init (init.py), bits/byte untrained, distillation (logit KL + hidden-state MSE to the
unmodified model), bits/byte trained, and OUT/mla_lite_r{d_c}.safetensors. Then the indexer on the original
attention: init, KL to the head-summed attention distribution (dense warm-up), bits/byte at each top-k,
OUT/dsa_lite.safetensors. Then both together (the rank nearest 4x smaller KV): the latent by distillation
and the indexer by KL over its selected set, with top-k attention on; OUT/both.safetensors. The table of
results goes to stdout and OUT/results.json. bf16 autocast on a GPU, fp32 on the CPU. --resume continues
training from files an earlier run wrote (a GPU call's time is bounded; training need not be).
"""
import argparse
import json
import math
import os
import sys
import time

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "train"))

import init  # noqa: E402
import st_io  # noqa: E402
from llama_ref import Model, Retrofit, index_scores  # noqa: E402


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


class ByteTokenizer:
    """--smoke-text: bytes as token ids, so the pipeline runs where `tokenizers` and the corpus are absent."""

    def encode(self, text, add_special_tokens=False):
        return type("Encoding", (), {"ids": list(text.encode("utf-8"))})


def token_stream(args, model_dir):
    """(train ids, validation text, tokenizer, bos) from the corpus the default model was trained on."""
    if args.smoke_text:
        with open(args.smoke_text, encoding="utf-8") as f:
            text = f.read()
        return torch.tensor(list(text.encode("utf-8")), dtype=torch.long), text[:args.valid_max_bytes or None], \
            ByteTokenizer(), 0
    import eval_bpb
    import train
    tok = eval_bpb.load_tokenizer(model_dir)
    bos = eval_bpb.bos_id(model_dir, tok)
    text = train.read_corpus_file(train.find_train_file(args.corpus))[:args.train_max_chars]
    ids = tok.encode(text, add_special_tokens=False).ids
    with open(os.path.join(args.corpus, "valid.txt"), "rb") as f:
        valid = f.read()[:args.valid_max_bytes or None].decode("utf-8", "ignore")
    return torch.tensor(ids, dtype=torch.long), valid, tok, bos


def batches(ids, batch, seq, bos, device, seed):
    g = torch.Generator().manual_seed(seed)
    while True:
        starts = torch.randint(0, len(ids) - seq, (batch,), generator=g)
        x = torch.stack([torch.cat([torch.tensor([bos]), ids[s:s + seq - 1]]) for s in starts.tolist()])
        yield x.to(device)


class Scored:
    """What eval_bpb.evaluate_text calls: a model whose output has .logits."""

    def __init__(self, model, retro, mla, dsa):
        self.model, self.retro, self.mla, self.dsa, self.training = model, retro, mla, dsa, False

    def eval(self):
        return self

    def train(self):
        return self

    def __call__(self, input_ids, use_cache=False):
        with torch.no_grad(), autocast(self.model.device):
            logits, _ = self.model.forward(input_ids, self.retro, self.mla, self.dsa)
        return type("Out", (), {"logits": logits.float()})


def autocast(device):
    return torch.autocast("cuda", dtype=torch.bfloat16) if device.startswith("cuda") else torch.autocast("cpu", enabled=False)


def bpb(args, data, model, retro=None, mla=False, dsa=False):
    import eval_bpb
    _, valid, tok, bos = data
    r = eval_bpb.evaluate_text(Scored(model, retro, mla, dsa), tok, bos, valid, args.context, args.context // 2,
                               args.eval_batch, model.device)
    return r["bpb"]


def distill_loss(model, retro, x, dsa, args):
    with torch.no_grad(), autocast(model.device):
        t_logits, t_hidden = model.forward(x)
    probe = [] if dsa else None
    with autocast(model.device):
        s_logits, s_hidden = model.forward(x, retro, mla=True, dsa=dsa, probe=probe)
    kl = F.kl_div(F.log_softmax(s_logits.float(), -1), F.log_softmax(t_logits.float(), -1), log_target=True,
                  reduction="batchmean") / x.shape[1]
    loss = kl + args.hidden_weight * F.mse_loss(s_hidden.float(), t_hidden.float())
    if dsa:
        loss = loss + indexer_kl(probe)
    return loss


def indexer_kl(probe):
    """sum over layers of KL(p || softmax(I)) over each query's allowed positions, p the head-summed
    attention normalised to 1 (DSA's warm-up target; over the selected set when attention is sparse)."""
    total = 0.0
    for layer in probe:
        mask, probs, scores = layer["mask"], layer["probs"].float(), layer["scores"].float()
        p = probs / probs.sum(-1, keepdim=True).clamp(min=1e-12)
        log_q = torch.log_softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)
        terms = torch.where(mask & (p > 0), p * (torch.log(p.clamp(min=1e-12)) - log_q), torch.zeros_like(p))
        total = total + terms.sum(-1).mean()
    return total


def index_loss(model, retro, x, mla):
    """The indexer's dense warm-up loss: the backbone (and the latent) run without gradients."""
    probe, inputs = [], []
    with torch.no_grad(), autocast(model.device):
        model.forward(x, retro, mla=mla, probe=probe, inputs=inputs)
    with autocast(model.device):
        layers = [{"mask": layer["mask"], "probs": layer["probs"], "scores": index_scores(retro, i, inputs[i])}
                  for i, layer in enumerate(probe)]
    return indexer_kl(layers)


def train(stage, params, loss_fn, stream, seconds, lr):
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.0)
    t0, step, last = time.time(), 0, float("nan")
    while time.time() - t0 < seconds:
        frac = (time.time() - t0) / seconds
        for group in opt.param_groups:
            group["lr"] = lr * 0.5 * (1 + math.cos(math.pi * min(frac, 1.0)))
        loss = loss_fn(next(stream))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        step, last = step + 1, loss.item()
        if step % 50 == 1:
            log(f"{stage} step {step} loss {last:.4f}")
    log(f"{stage}: {step} steps in {time.time() - t0:.0f} s, last loss {last:.4f}")
    return step


def kv_values_per_token(cfg, rank=0, freqs=0, index_dim=0, rope_keys=None):
    """Cached values per token, all layers: K and V, or the latent and RoPE features (one RoPE key per KV head
    unless shared); plus indexer keys."""
    keys = cfg.kv_heads if rope_keys is None else rope_keys
    per_layer = (rank + keys * 2 * freqs) if rank else 2 * cfg.kv_heads * cfg.head_dim
    return cfg.layers * (per_layer + index_dim)


def resumed_latent(args, rank):
    """(path, kept frequencies) of the first --resume file whose latent has this rank; (None, None) if none."""
    for path in args.resume:
        tensors, meta = st_io.read(path)
        kv_down = tensors.get("model.layers.0.self_attn.mla_lite.kv_down.weight")
        if kv_down is not None and kv_down.shape[0] == rank:
            return path, [int(f) for f in meta.get("mla_lite.rope_freqs", "").split(",") if f]
    return None, None


def run_mla(args, model, data, inputs, stream, rank):
    path, freqs = resumed_latent(args, rank)
    retro = Retrofit(model.cfg, rank=rank, freqs=freqs or init.choose_freqs(model, inputs, args.freqs),
                     q_rank=args.q_rank, k_rope=args.k_rope, shared_rope=args.shared_rope).to(model.device)
    if path:
        retro.load(path, "mla_lite")
        log(f"MLA-lite d_c={rank}: resumed from {path}")
    else:
        init.init_mla_lite(model, retro, inputs)
    row = {"kind": "mla_lite", "rank": rank, "rope_freqs": retro.freqs,
           "kv_values_per_token": kv_values_per_token(model.cfg, rank, args.freqs, rope_keys=retro.rope_keys)}
    row["bpb_svd"] = bpb(args, data, model, retro, mla=True)
    log(f"MLA-lite d_c={rank}: untrained {row['bpb_svd']:.4f}")
    row["steps"] = train(f"mla d_c={rank}", retro.mla_parameters(), lambda x: distill_loss(model, retro, x, False, args),
                         stream, args.mla_seconds, args.lr)
    row["bpb"] = bpb(args, data, model, retro, mla=True)
    log(f"MLA-lite d_c={rank}: trained {row['bpb']:.4f}")
    st_io.write(os.path.join(args.out, f"mla_lite_r{rank}.safetensors"), retro.tensors(), retro.metadata())
    return retro, row


def indexer_retrofit(args, model, inputs, mla_retro=None):
    r = Retrofit(model.cfg, rank=mla_retro.rank if mla_retro else 0, freqs=mla_retro.freqs if mla_retro else (),
                 index_heads=args.index_heads, index_dim=args.index_dim, top_k=args.top_ks[0], sink=args.sink,
                 window=args.window, index_rope=args.index_rope, q_rank=mla_retro.q_rank if mla_retro else 0,
                 k_rope=mla_retro is not None and mla_retro.k_rope is not None,
                 shared_rope=mla_retro is not None and mla_retro.rope_keys == 1).to(model.device)
    init.init_indexer(model, r, inputs)
    if mla_retro is not None:
        with torch.no_grad():
            for a, b in zip(r.mla_parameters(), mla_retro.mla_parameters()):
                a.copy_(b)
    return r


def run_dsa(args, model, data, inputs, stream):
    retro = indexer_retrofit(args, model, inputs)
    for path in args.resume:
        if retro.load(path, "dsa_lite"):
            log(f"DSA-lite: resumed from {path}")
            break
    rows = []
    retro.top_k = 64 if 64 in args.top_ks else args.top_ks[0]
    untrained = bpb(args, data, model, retro, dsa=True)
    steps = train("indexer", retro.index_parameters(), lambda x: index_loss(model, retro, x, False), stream,
                  args.index_seconds, args.index_lr)
    for k in args.top_ks:
        retro.top_k = k
        row = {"kind": "dsa_lite", "top_k": k, "steps": steps, "bpb": bpb(args, data, model, retro, dsa=True),
               "kv_values_per_token": kv_values_per_token(model.cfg, index_dim=args.index_dim)}
        if k == (64 if 64 in args.top_ks else args.top_ks[0]):
            row["bpb_untrained"] = untrained
        log(f"DSA-lite k={k}: {row['bpb']:.4f}")
        rows.append(row)
        if args.dsa_oracle:
            retro.oracle = True
            rows.append({"kind": "dsa_oracle", "top_k": k, "bpb": bpb(args, data, model, retro, dsa=True),
                         "kv_values_per_token": row["kv_values_per_token"]})
            retro.oracle = False
            log(f"DSA-lite k={k}, selected by the dense attention itself: {rows[-1]['bpb']:.4f}")
    retro.top_k = 64 if 64 in args.top_ks else args.top_ks[0]
    st_io.write(os.path.join(args.out, "dsa_lite.safetensors"), retro.tensors(), retro.metadata())
    return retro, rows


def run_both(args, model, data, inputs, stream, mla_retro, dsa_retro):
    retro = indexer_retrofit(args, model, inputs, mla_retro)
    with torch.no_grad():
        for a, b in zip(retro.index_parameters(), dsa_retro.index_parameters()):
            a.copy_(b)
    retro.top_k = dsa_retro.top_k
    row = {"kind": "both", "rank": retro.rank, "top_k": retro.top_k,
           "kv_values_per_token": kv_values_per_token(model.cfg, retro.rank, args.freqs, args.index_dim,
                                                      retro.rope_keys)}
    row["bpb_before_joint"] = bpb(args, data, model, retro, mla=True, dsa=True)
    params = retro.mla_parameters() + retro.index_parameters()
    row["steps"] = train("both", params, lambda x: distill_loss(model, retro, x, True, args), stream,
                         args.both_seconds, args.both_lr)
    row["bpb"] = bpb(args, data, model, retro, mla=True, dsa=True)
    log(f"both d_c={retro.rank} k={retro.top_k}: {row['bpb_before_joint']:.4f} -> {row['bpb']:.4f}")
    st_io.write(os.path.join(args.out, "both.safetensors"), retro.tensors(), retro.metadata())
    return row


def print_table(base, rows, cfg):
    full = kv_values_per_token(cfg)
    print(f"\n| retrofit | d_c | k | KV values/token | KV smaller | bits/byte untrained | bits/byte trained | vs original |")
    print("|---|---|---|---|---|---|---|---|")
    print(f"| original | | | {full} | 1.00x | | {base:.4f} | |")
    for r in rows:
        before = r.get("bpb_svd", r.get("bpb_untrained", r.get("bpb_before_joint")))
        print(f"| {r['kind']} | {r.get('rank', '')} | {r.get('top_k', '')} | {r['kv_values_per_token']} | "
              f"{full / r['kv_values_per_token']:.2f}x | {'' if before is None else f'{before:.4f}'} | {r['bpb']:.4f} | "
              f"{100 * (r['bpb'] / base - 1):+.2f}% |")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="models/default")
    ap.add_argument("--corpus", default=".corpus")
    ap.add_argument("--out", required=True)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    # Defaults from the sweeps on the default model (bench/RESULTS.md, 2026-11-27 and 2026-11-29): with the
    # query adapter and trained kept K rows, per-KV-head keys: 2 kept frequencies and d_c 56 beat 4/48 and
    # 8/32 at 4x smaller KV (+4.0% vs +4.6% and +7.0% bits/byte in 340 s); then at equal 100 s one shared RoPE
    # key of 8 frequencies with d_c 48 beat that (+7.05% vs +7.71%). In 400 s at that geometry lr 2e-3 beat
    # 1e-3 (+3.90% vs +4.91%) and a rank-128 adapter beat rank 64 (+3.59%); resumed for 420 s more, +2.96%.
    ap.add_argument("--ranks", default="112,48", help="d_c values; the one nearest 4x smaller KV joins DSA-lite")
    ap.add_argument("--freqs", type=int, default=8, help="RoPE frequencies kept (2 features each) per RoPE key")
    ap.add_argument("--q-rank", type=int, default=128,
                    help="MLA-lite: rank of a trained query adapter q_proj + q_up q_down (0: the model's queries)")
    ap.add_argument("--k-rope", action=argparse.BooleanOptionalAction, default=True,
                    help="MLA-lite: train the kept RoPE rows of K (from k_proj's)")
    ap.add_argument("--shared-rope", action=argparse.BooleanOptionalAction, default=True,
                    help="MLA-lite: one trained RoPE key for every KV head (caches 2 x freqs, not kv_heads x that)")
    ap.add_argument("--top-ks", default="64,32,128", help="DSA-lite k values (the first file is written with 64)")
    ap.add_argument("--index-heads", type=int, default=4)
    ap.add_argument("--index-dim", type=int, default=32)
    ap.add_argument("--index-rope", type=int, default=16, help="indexer query/key features rotated by position, as "
                    "DeepSeek-V3.2's (even; 0: none). 16 of 4 x 32: +0.84%% bits/byte at k 64 against +2.53%% without")
    ap.add_argument("--sink", type=int, default=4)
    ap.add_argument("--window", type=int, default=16)
    ap.add_argument("--mla-seconds", type=float, default=150)
    ap.add_argument("--index-seconds", type=float, default=120)
    ap.add_argument("--both-seconds", type=float, default=100)
    ap.add_argument("--lr", type=float, default=2e-3, help="MLA-lite's training")
    ap.add_argument("--both-lr", type=float, default=1e-3, help="the joint training of both")
    ap.add_argument("--index-lr", type=float, default=3e-4)
    ap.add_argument("--hidden-weight", type=float, default=1.0, help="weight of the hidden-state MSE beside the KL")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--context", type=int, default=512)
    ap.add_argument("--eval-batch", type=int, default=16)
    ap.add_argument("--train-max-chars", type=int, default=20_000_000)
    ap.add_argument("--valid-max-bytes", type=int, default=0, help="score a prefix of valid.txt (0: all)")
    ap.add_argument("--smoke-text", default="", help="a local text as both corpus and validation, bytes as ids")
    ap.add_argument("--resume", default="", help="comma list of files this tool wrote: training continues from "
                    "their MLA-lite part (for the d_c it has, with its frequencies) and DSA-lite part; 0 seconds "
                    "only scores them")
    ap.add_argument("--dsa-oracle", action="store_true", help="also score top-k chosen by the dense attention "
                    "itself (the bound on any indexer)")
    ap.add_argument("--skip", default="", help="comma list of stages to skip: mla,dsa,both")
    args = ap.parse_args()
    args.ranks = [int(r) for r in args.ranks.split(",")]
    args.top_ks = [int(k) for k in args.top_ks.split(",")]
    args.resume = [p for p in args.resume.split(",") if p]
    os.makedirs(args.out, exist_ok=True)
    torch.manual_seed(0)

    model = Model(args.model, args.device)
    data = token_stream(args, args.model)
    stream = batches(data[0], args.batch, args.context, data[3], args.device, seed=1)
    inputs = init.layer_inputs(model, next(batches(data[0], 8, args.context, data[3], args.device, seed=2)))
    base = bpb(args, data, model)
    log(f"original: {base:.4f} bits/byte")
    rows, mla_by_rank, skip = [], {}, set(args.skip.split(","))
    if "mla" not in skip:
        for rank in args.ranks:
            mla_by_rank[rank], row = run_mla(args, model, data, inputs, stream, rank)
            rows.append(row)
    dsa_retro = None
    if "dsa" not in skip:
        dsa_retro, dsa_rows = run_dsa(args, model, data, inputs, stream)
        rows += dsa_rows
    if "both" not in skip and mla_by_rank and dsa_retro is not None:
        full = kv_values_per_token(model.cfg)
        rank = min(mla_by_rank, key=lambda r: abs(full / kv_values_per_token(model.cfg, r, args.freqs,
                                                                             rope_keys=mla_by_rank[r].rope_keys) - 4))
        rows.append(run_both(args, model, data, inputs, stream, mla_by_rank[rank], dsa_retro))
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump({"original_bpb": base, "rows": rows, "args": vars(args)}, f, indent=1)
    print_table(base, rows, model.cfg)


if __name__ == "__main__":
    main()
