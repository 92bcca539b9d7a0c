#!/usr/bin/env python3
"""Continues the training of a Hugging Face Llama folder (the bundled chat model) at a long context, keeping its
chat tuning: every step adds the loss on chat dialogues (chat_tune.py's rendering and masking) to the plain
next-token loss on corpus windows of --seq-len tokens.

    python3 tools/train/long_context.py [--base models/drift-chat-15m] [--seq-len 4096] [--minutes 4]

  * data: the corpus token stream of train.py ([BOS] ids [EOS] per document, concatenated; the same cache file).
    A window is seq-len + 1 tokens starting at a document start (--doc-start-share of them; documents picked in
    proportion to their length up to the window, so the long ones, which carry the long-range signal, come
    often) or at a random offset (the rest); windows run on across document boundaries as in pre-training.
    Dialogues: chat_train.jsonl.gz encoded by chat_tune.ChatEncoder (loss only on the assistant's replies),
    padded per batch, each from position 0, at weight --chat-weight.
  * RoPE: the base's theta (10000) is kept: at head_dim 64 its slowest pair turns once in about 47,000
    positions, so 4096 positions stay distinguishable; Llama 2 trained at 4096 with the same theta. Only the
    angles the model never saw (positions 512..4095) are new, and continued training teaches them directly, with
    no rope_scaling for an engine to implement. config.json gets max_position_embeddings = seq-len.
  * optimisation: AdamW from the base weights (fp32 master, bf16 autocast, SDPA), warm-up then cosine to
    --min-lr-ratio over the wall-clock budget (--minutes from process start, less --reserve-seconds), as
    train.py; --accum micro-batches per step if one batch does not fit.
  * output: WORK/hf/longctx (bf16, save_pretrained; tokenizer.json, tokenizer_config.json (model_max_length =
    seq-len) and generation_config.json copied from the base), then the base and the export, each reloaded in
    float32, are measured the same way: bits per byte on valid.txt (eval_bpb.py's definition) at context 512
    stride 256 and at context seq-len stride seq-len/2, mean loss per position bucket (0-512, 512-1024, 1024-2048,
    2048-4096) over windows starting at the longest validation documents, chat loss on held-out and seen
    dialogues, and greedy transcripts of fixed questions; all in training.json. The log ends with a RESULT line.
"""
import time

T_START = time.time()

import argparse  # noqa: E402
import collections  # noqa: E402
import contextlib  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import os  # noqa: E402
import random  # noqa: E402
import shutil  # noqa: E402
import sys  # noqa: E402
import types  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import chat_tune  # noqa: E402
import eval_bpb  # noqa: E402
import train  # noqa: E402
from train import BOS, EOS, log  # noqa: E402

Data = collections.namedtuple("Data", "enc corpus doc_starts doc_p valid_text valid_tokens windows "
                                      "train_items valid_items seen_items questions")


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", default=os.path.join(train.REPO, "models", "drift-chat-15m"))
    ap.add_argument("--corpus", default=os.path.join(train.REPO, ".corpus"))
    ap.add_argument("--work", default="/tmp/drift-train", help="token cache (shared with train.py) and output")
    ap.add_argument("--out", default=None, help="HF folder (default WORK/hf/longctx)")
    ap.add_argument("--seq-len", type=int, default=4096)
    ap.add_argument("--batch-size", type=int, default=16, help="corpus windows per micro-batch")
    ap.add_argument("--doc-start-share", type=float, default=0.75, help="share of windows that start a document")
    ap.add_argument("--chat-batch-size", type=int, default=64, help="dialogues per micro-batch")
    ap.add_argument("--chat-weight", type=float, default=1.0)
    ap.add_argument("--chat-pool", type=int, default=16384,
                    help="training dialogues encoded (a random sample; 0: all): a run of a few minutes draws fewer")
    ap.add_argument("--accum", type=int, default=1, help="micro-batches per optimiser step")
    ap.add_argument("--lr", type=float, default=3e-4)
    ap.add_argument("--min-lr-ratio", type=float, default=0.1)
    ap.add_argument("--warmup-steps", type=int, default=50)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--grad-clip", type=float, default=1.0)
    ap.add_argument("--minutes", type=float, default=4.0, help="wall-clock budget of this process, from its start")
    ap.add_argument("--reserve-seconds", type=float, default=60.0, help="kept for export and evaluation")
    ap.add_argument("--eval-every-seconds", type=float, default=60.0)
    ap.add_argument("--log-every", type=int, default=20)
    ap.add_argument("--max-steps", type=int, default=0, help="stop after this many steps (smoke tests)")
    ap.add_argument("--max-train-bytes", type=int, default=0, help="use only this much training text (smoke tests)")
    ap.add_argument("--max-dialogues", type=int, default=0, help="use only this many dialogues (smoke tests)")
    ap.add_argument("--valid-max-bytes", type=int, default=0, help="bits per byte on a prefix of valid.txt")
    ap.add_argument("--eval-windows", type=int, default=32,
                    help="validation windows (at the longest documents) for the loss per position")
    ap.add_argument("--quick-windows", type=int, default=8, help="of those, measured during training")
    ap.add_argument("--questions", type=int, default=0, help="transcripts of only this many questions (0: all)")
    ap.add_argument("--save-dtype", choices=["bfloat16", "float32"], default="bfloat16")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--device", default=None)
    args = ap.parse_args(argv)
    args.max_position = 0  # write_hf_folder's model_max_length: --seq-len
    return args


# ---------------------------------------------------------------------------------------------------------
# data

def corpus_tokens(work, corpus_dir, tok, tok_path, max_train_bytes=0):
    """train.py's token cache of the training text (WORK/cache/train-KEY.npy, the same key as train.py and
    chat_tune.py, so a cache one of them wrote is reused), built if missing."""
    path = train.find_train_file(corpus_dir)

    def docs():
        text = train.read_corpus_file(path)
        return train.split_docs(text[:max_train_bytes] if max_train_bytes else text)

    return train.token_cache(types.SimpleNamespace(work=work), tok, tok_path, "train", docs,
                             [train.file_digest(path), str(max_train_bytes)])


def document_starts(tokens, bos):
    """Offsets of the documents in a stream of [BOS] ids [EOS] and their lengths (BOS and EOS included)."""
    starts = np.flatnonzero(tokens == bos).astype(np.int64)
    return starts, np.append(starts[1:], len(tokens)) - starts


def doc_start_sampler(starts, lens, length, total):
    """The document starts a span of `length` tokens fits after, and their probabilities: in proportion to the
    document's length up to `length`, so that long documents come often (uniform over tokens of short ones)."""
    ok = starts + length <= total
    if not ok.any():
        return starts[:0], np.zeros(0)
    w = np.minimum(lens[ok], length).astype(np.float64)
    return starts[ok], w / w.sum()


def long_windows(tokens, bos, seq_len, n):
    """(start, document length) of up to n windows of seq_len + 1 tokens at the starts of the longest documents."""
    starts, lens = document_starts(tokens, bos)
    order = np.argsort(-lens, kind="stable")
    out = [(int(starts[d]), int(lens[d])) for d in order if starts[d] + seq_len + 1 <= len(tokens)]
    return out[:n]


def load_chat(args, tok):
    """(encoder, training items, held-out items, seen items, questions). The held-out and seen sets are those of
    chat_tune.py (chat_valid.jsonl; a fixed sample of training dialogues of its size), so losses compare."""
    enc = chat_tune.ChatEncoder(tok)
    train_d = chat_tune.read_dialogues(os.path.join(args.corpus, "chat_train.jsonl.gz"))
    valid_path = os.path.join(args.corpus, "chat_valid.jsonl")
    valid_d = chat_tune.read_dialogues(valid_path) if os.path.exists(valid_path) else []
    if args.max_dialogues:
        train_d, valid_d = train_d[:args.max_dialogues], valid_d[:max(args.max_dialogues // 20, 8)]
    seen_d = random.Random(1).sample(train_d, min(len(valid_d) or 243, len(train_d)))
    enc.check(random.Random(0).sample(train_d, min(500, len(train_d))))
    pool = random.Random(args.seed).sample(train_d, args.chat_pool) if 0 < args.chat_pool < len(train_d) else train_d
    questions = chat_tune.FIXED_QUESTIONS + chat_tune.first_questions(valid_d, 4)
    if args.questions:
        questions = questions[:args.questions]
    return (enc, chat_tune.encode_all(enc, pool, 512), chat_tune.encode_all(enc, valid_d, 512) if valid_d else [],
            chat_tune.encode_all(enc, seen_d, 512), questions)


def load_data(args, tok, tok_path, device):
    bos = tok.token_to_id(BOS)
    tokens = corpus_tokens(args.work, args.corpus, tok, tok_path, args.max_train_bytes)
    if len(tokens) < args.seq_len + 2:
        raise ValueError(f"the corpus has {len(tokens):,} tokens: too few for one window of {args.seq_len + 1}")
    starts, p = doc_start_sampler(*document_starts(tokens, bos), args.seq_len + 1, len(tokens))
    valid_path = os.path.join(args.corpus, "valid.txt")
    with open(valid_path, "rb") as f:
        raw = f.read()
    vtokens = train.token_cache(args, tok, tok_path, "valid", lambda: train.split_docs(raw.decode("utf-8")),
                                [train.file_digest(valid_path)])
    text = raw.decode("utf-8")
    if args.valid_max_bytes:
        text = raw[:args.valid_max_bytes].decode("utf-8", "ignore")
    windows = long_windows(vtokens, bos, args.seq_len, args.eval_windows)
    enc, train_items, valid_items, seen_items, questions = load_chat(args, tok)
    lens = [length for _, length in windows]
    log(f"corpus: {len(tokens):,} tokens, {len(starts):,} documents a window can start at; validation: "
        f"{len(windows)} windows at documents of {min(lens, default=0):,}..{max(lens, default=0):,} tokens; "
        f"{len(train_items):,} training dialogues encoded")
    return Data(enc, torch.from_numpy(tokens.astype(np.int64)).to(device), starts, p, text,
                torch.from_numpy(vtokens.astype(np.int64)), windows, train_items, valid_items, seen_items, questions)


def window_offsets(n, data, args, rng):
    """n window offsets: round(n * doc-start-share) at document starts, the rest uniformly random."""
    n_doc = int(round(n * args.doc_start_share)) if len(data.doc_starts) else 0
    doc = data.doc_starts[rng.choice(len(data.doc_starts), size=n_doc, p=data.doc_p)] if n_doc else []
    rnd = rng.integers(0, len(data.corpus) - args.seq_len - 1, size=n - n_doc)
    off = np.concatenate([np.asarray(doc, dtype=np.int64), rnd.astype(np.int64)])
    return torch.from_numpy(off).to(data.corpus.device)


# ---------------------------------------------------------------------------------------------------------
# evaluation

def bucket_edges(seq_len):
    """[0, 512, 1024, 2048, ..., seq_len]: doubling buckets of positions, the last one ending at seq_len."""
    edges = [0, 512]
    while edges[-1] < seq_len:
        edges.append(edges[-1] * 2)
    return [e for e in edges if e < seq_len] + [seq_len]


@torch.no_grad()
def position_losses(model, data, seq_len, device, windows=None, exact=True, batch=4):
    """Mean next-token loss per bucket of the predicting token's position (0 = the window's first token, its
    document's BOS) over validation windows at document starts: over all positions, and over those whose target
    is still in the window's first document (there the whole window before is that document: the long-range
    signal). exact: float32 without TF32 (the reference); else bf16 autocast (the quick look during training)."""
    windows = data.windows if windows is None else windows
    edges = bucket_edges(seq_len)
    nb = len(edges) - 1
    tot, cnt = torch.zeros(2, nb, dtype=torch.float64), torch.zeros(2, nb, dtype=torch.float64)
    pos = torch.arange(seq_len, device=device)
    bucket = torch.bucketize(pos, torch.tensor(edges[1:-1], device=device), right=True)   # [seq_len] in 0..nb-1
    was_training = model.training
    model.eval()
    precision = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("highest" if exact else precision)
    try:
        for i in range(0, len(windows), batch):
            group = windows[i:i + batch]
            x = torch.stack([data.valid_tokens[s:s + seq_len + 1] for s, _ in group]).to(device)
            with (contextlib.nullcontext() if exact else train.autocast(device)):
                logits = model(input_ids=x[:, :-1], use_cache=False).logits
            nll = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1),
                                  reduction="none").view(len(group), seq_len).double()
            doclen = torch.tensor([n for _, n in group], device=device)
            in_doc = (pos[None] <= doclen[:, None] - 2).double()                 # target index p+1 <= EOS's
            for which, w in enumerate((torch.ones_like(in_doc), in_doc)):
                tot[which] += torch.zeros(nb, dtype=torch.float64, device=device).index_add_(
                    0, bucket, (nll * w).sum(0)).cpu()
                cnt[which] += torch.zeros(nb, dtype=torch.float64, device=device).index_add_(0, bucket, w.sum(0)).cpu()
    finally:
        torch.set_float32_matmul_precision(precision)
    if was_training:
        model.train()
    mean = (tot / cnt.clamp(min=1)).tolist()
    return {f"{edges[b]}-{edges[b + 1]}": {"loss": round(mean[0][b], 4), "loss_in_document": round(mean[1][b], 4),
                                          "tokens_in_document": int(cnt[1][b])} for b in range(nb)}


def fmt_buckets(res, key="loss_in_document"):
    return "  ".join(f"{k}: {v[key]:.3f}" for k, v in res.items())


def evaluate_folder(folder, data, args, device, what):
    """The measurements recorded before (the base) and after (the export), on the folder reloaded in float32."""
    tok = eval_bpb.load_tokenizer(folder)
    bos = eval_bpb.bos_id(folder, tok)
    model = eval_bpb.load_model(folder, device, "float32")
    res = {"folder": os.path.abspath(folder), "bpb": {}}
    for ctx in sorted({512, args.seq_len}):
        r = eval_bpb.evaluate_text(model, tok, bos, data.valid_text, ctx, ctx // 2, max(1, 16 * 512 // ctx), device)
        res["bpb"][str(ctx)] = r
        log(f"{what}: bits per byte at context {ctx}, stride {ctx // 2}: {r['bpb']:.4f} (loss/token "
            f"{r['loss_per_token']:.4f}, {r['scored_tokens']:,} tokens, {r['seconds']:.1f}s)")
    res["position_loss"] = position_losses(model, data, args.seq_len, device)
    log(f"{what}: loss per position in the first document of {len(data.windows)} windows: "
        f"{fmt_buckets(res['position_loss'])}")
    pad = tok.token_to_id(EOS)
    res["chat_loss"] = {"held_out": chat_tune.valid_chat_loss(model, data.valid_items, pad, device)
                        if data.valid_items else None,
                        "seen": chat_tune.valid_chat_loss(model, data.seen_items, pad, device)}
    log(f"{what}: chat loss {res['chat_loss']}")
    model.eval()  # valid_chat_loss leaves it in training mode
    res["transcripts"] = []
    for q in data.questions:
        a = chat_tune.greedy_reply(model, data.enc, [{"role": "user", "content": q}], device)
        res["transcripts"].append({"user": q, "assistant": a})
        log(f"{what}: chat: {q!r} -> {a!r}")
    del model
    if device == "cuda":
        torch.cuda.empty_cache()
    return res


# ---------------------------------------------------------------------------------------------------------
# training

def load_for_training(folder, device):
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    if getattr(model.config, "_attn_implementation", None) != "sdpa":
        try:
            model.set_attn_implementation("sdpa")
        except Exception as e:  # keep whatever the default was
            log(f"note: could not select SDPA attention: {type(e).__name__}: {e}")
    log(f"model {type(model).__name__}: {train.count_params(model)[0]:,} parameters, attention "
        f"{getattr(model.config, '_attn_implementation', '?')}, rope {getattr(model.config, 'rope_parameters', None)}")
    return model.to(device).train()


def train_step(model, opt, data, args, rng, pyrng, pad, device):
    """One optimiser step over --accum micro-batches: the window loss and the weighted chat loss, each backward
    on its own (the long windows' graph is freed before the dialogues')."""
    opt.zero_grad(set_to_none=True)
    lm, chat = 0.0, 0.0
    for _ in range(args.accum):
        x, y = train.batch_from(data.corpus, window_offsets(args.batch_size, data, args, rng), args.seq_len)
        loss_lm = chat_tune.chat_loss(model, x, y)
        (loss_lm / args.accum).backward()
        lm += float(loss_lm) / args.accum
        if args.chat_weight > 0 and args.chat_batch_size > 0:
            cx, cy = chat_tune.chat_batch(pyrng.sample(data.train_items, min(args.chat_batch_size,
                                                                             len(data.train_items))), pad, device)
            loss_chat = chat_tune.chat_loss(model, cx, cy)
            (args.chat_weight * loss_chat / args.accum).backward()
            chat += float(loss_chat) / args.accum
    gnorm = torch.nn.utils.clip_grad_norm_(model.parameters(), args.grad_clip)
    opt.step()
    if not (math.isfinite(lm) and math.isfinite(chat)):
        raise FloatingPointError(f"loss is not finite: window {lm}, chat {chat}")
    return lm, chat, float(gnorm)


OOM = getattr(torch.cuda, "OutOfMemoryError", MemoryError)


def halve_batch(args, opt, device):
    """After running out of memory: half the micro-batch, twice the micro-batches (the same step); False at 1."""
    if args.batch_size < 2:
        return False
    opt.zero_grad(set_to_none=True)
    if device == "cuda":
        torch.cuda.empty_cache()
    args.batch_size //= 2
    args.chat_batch_size = max(1, args.chat_batch_size // 2)
    args.accum *= 2
    log(f"out of GPU memory: now {args.accum} micro-batches of {args.batch_size} windows + {args.chat_batch_size} "
        f"dialogues per step")
    return True


def train_loop(args, model, opt, data, device, deadline):
    pad = data.enc.tok.token_to_id(EOS)
    rng, pyrng = np.random.default_rng(args.seed), random.Random(args.seed)
    t0, step, tokens, history, last_eval = time.time(), 0, 0, [], time.time()
    schedule_s = max(deadline - t0, 1.0)
    log(f"training: {args.accum} x ({args.batch_size} windows of {args.seq_len} + {args.chat_batch_size} dialogues "
        f"at weight {args.chat_weight}) per step, lr {args.lr} (warm-up {args.warmup_steps} steps, cosine to "
        f"{args.lr * args.min_lr_ratio:g} over {schedule_s:.0f} s)")
    while time.time() < deadline and not (args.max_steps and step >= args.max_steps):
        lr = train.lr_at(step, (time.time() - t0) / schedule_s, args)
        for g in opt.param_groups:
            g["lr"] = lr
        try:
            lm, chat, gnorm = train_step(model, opt, data, args, rng, pyrng, pad, device)
            oom = False
        except OOM:
            oom = True  # handled below, once the exception (and the step's tensors it holds) is gone
        if oom:
            if not halve_batch(args, opt, device):
                raise RuntimeError("out of GPU memory with one window per micro-batch")
            continue
        step += 1
        tokens += args.accum * args.batch_size * args.seq_len
        if step % args.log_every == 0 or step == 1:
            rate = tokens / max(time.time() - t0, 1e-6)
            mem = f"  max GPU memory {torch.cuda.max_memory_allocated() / 2**30:.1f} GiB" if device == "cuda" else ""
            log(f"step {step:5d}  window loss {lm:.4f}  chat loss {chat:.4f}  lr {lr:.2e}  gnorm {gnorm:.2f}  "
                f"{rate / 1e3:,.0f}k window tok/s{mem}")
            history.append({"step": step, "window_loss": lm, "chat_loss": chat, "lr": lr,
                            "t": round(time.time() - T_START, 1)})
        if time.time() - last_eval >= args.eval_every_seconds:
            history.append(quick_eval(model, data, args, device, step, pad))
            last_eval = time.time()
    history.append(quick_eval(model, data, args, device, step, pad))
    return step, tokens, history


def quick_eval(model, data, args, device, step, pad):
    pl = position_losses(model, data, args.seq_len, device, data.windows[:args.quick_windows], exact=False)
    seen = chat_tune.valid_chat_loss(model, data.seen_items, pad, device)
    log(f"step {step:5d}  validation loss per position (first document): {fmt_buckets(pl)}  seen chat loss {seen:.4f}")
    return {"step": step, "position_loss": pl, "seen_chat_loss": seen, "t": round(time.time() - T_START, 1)}


# ---------------------------------------------------------------------------------------------------------
# output

def export(model, tok, tok_path, args, meta):
    """The HF folder: train.write_hf_folder with max_position_embeddings = seq-len, then the base's tokenizer files
    and generation config copied over (tokenizer_config.json with model_max_length = seq-len)."""
    out_dir = args.out or os.path.join(args.work, "hf", "longctx")
    if os.path.abspath(out_dir) == os.path.abspath(args.base):
        raise ValueError("--out must not be the base folder (write_hf_folder empties it first)")
    model.config.max_position_embeddings = args.seq_len
    train.write_hf_folder(model, tok, tok_path, out_dir, args, meta)
    for name in ("tokenizer.json", "generation_config.json"):
        if os.path.exists(os.path.join(args.base, name)):
            shutil.copyfile(os.path.join(args.base, name), os.path.join(out_dir, name))
    tok_cfg = train.read_json(os.path.join(args.base, "tokenizer_config.json"))
    if isinstance(tok_cfg, dict):
        tok_cfg["model_max_length"] = args.seq_len
        with open(os.path.join(out_dir, "tokenizer_config.json"), "w") as f:
            json.dump(tok_cfg, f, indent=1, ensure_ascii=False)
    cfg = train.read_json(os.path.join(out_dir, "config.json")) or {}
    theta = (cfg.get("rope_parameters") or {}).get("rope_theta", cfg.get("rope_theta"))
    log(f"config.json: max_position_embeddings {cfg.get('max_position_embeddings')}, rope theta {theta}")
    if cfg.get("max_position_embeddings") != args.seq_len:
        raise RuntimeError(f"{out_dir}/config.json: max_position_embeddings is {cfg.get('max_position_embeddings')}")
    return out_dir


def summary(before, after, key):
    return {"before": before[key], "after": after[key]}


def main(argv=None):
    args = parse_args(argv)
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    random.seed(args.seed)
    torch.manual_seed(args.seed)
    import transformers
    from tokenizers import Tokenizer
    log(f"torch {torch.__version__}, transformers {transformers.__version__}, device {device}"
        + (f" ({torch.cuda.get_device_name()})" if device == "cuda" else ""))
    tok_path = os.path.join(args.base, "tokenizer.json")
    tok = Tokenizer.from_file(tok_path)
    train.check_tokenizer(tok)
    data = load_data(args, tok, tok_path, device)
    before = evaluate_folder(args.base, data, args, device, "before")
    model = load_for_training(args.base, device)
    opt = train.make_optimizer(model, args, device)
    deadline = T_START + args.minutes * 60.0 - args.reserve_seconds
    step, tokens, history = train_loop(args, model, opt, data, device, deadline)
    log(f"training done: {step} steps, {tokens:,} window tokens ({tokens / len(data.corpus):.2f} epochs of the corpus)")
    meta = {"base": os.path.abspath(args.base), "recipe": "long_context.py: continued training at seq_len, "
            "corpus windows (document starts preferred) + chat dialogues at chat_weight", "seq_len": args.seq_len,
            "steps": step, "window_tokens": tokens, "corpus_tokens": int(len(data.corpus)),
            "validation_windows": [{"start": s, "document_tokens": n} for s, n in data.windows],
            "args": vars(args), "history": history, "corpus_manifest": train._read_manifest(args.corpus),
            "dialogues": train.read_json(os.path.join(args.corpus, "chat_manifest.json")),
            "torch": torch.__version__, "transformers": transformers.__version__}
    out_dir = export(model, tok, tok_path, args, meta)
    del opt, model
    if device == "cuda":
        torch.cuda.empty_cache()
    after = evaluate_folder(out_dir, data, args, device, "after")
    meta.update({"before": before, "after": after, "valid_bpb": after["bpb"]["512"],
                 "valid_bpb_long": after["bpb"][str(args.seq_len)],
                 "summary": {"bpb_512": {"before": before["bpb"]["512"]["bpb"], "after": after["bpb"]["512"]["bpb"]},
                             f"bpb_{args.seq_len}": {"before": before["bpb"][str(args.seq_len)]["bpb"],
                                                     "after": after["bpb"][str(args.seq_len)]["bpb"]},
                             "position_loss_in_document": {
                                 k: {"before": before["position_loss"][k]["loss_in_document"],
                                     "after": after["position_loss"][k]["loss_in_document"]}
                                 for k in after["position_loss"]},
                             "chat_loss": summary(before, after, "chat_loss")},
                 "seconds": round(time.time() - T_START, 1)})
    with open(os.path.join(out_dir, "training.json"), "w") as f:
        json.dump(meta, f, indent=1, default=str)
    with open(os.path.join(out_dir, "eval_bpb.json"), "w") as f:
        json.dump(after["bpb"]["512"], f, indent=1)
    s = meta["summary"]
    last = list(s["position_loss_in_document"].items())[-1]
    log(f"RESULT long_context: bpb@512 {s['bpb_512']['before']:.4f} -> {s['bpb_512']['after']:.4f}  "
        f"bpb@{args.seq_len} {s[f'bpb_{args.seq_len}']['before']:.4f} -> {s[f'bpb_{args.seq_len}']['after']:.4f}  "
        f"in-document loss at positions {last[0]} {last[1]['before']:.3f} -> {last[1]['after']:.3f}  "
        f"seen chat loss {s['chat_loss']['before']['seen']:.4f} -> {s['chat_loss']['after']['seen']:.4f}  "
        f"steps {step}  -> {out_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
