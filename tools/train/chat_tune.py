#!/usr/bin/env python3
"""Chat-tunes the bundled base model on the synthetic dialogues of dialogues.py, keeping it a language model:
every step adds the plain next-token loss on corpus windows to the loss on the assistant's replies.

    python3 tools/train/chat_tune.py --base models/drift-llama-15m [--corpus .corpus] [--minutes 7]

  * data: each dialogue rendered as the chat template renders it (BOS, then per message the role header, two
    newlines, the trimmed content and <|eot_id|>); only the assistant's content and its <|eot_id|> are scored.
    Dialogues are padded per batch, never packed, so each starts at position 0 after BOS as a served chat does.
    Corpus windows (512 tokens, as in pre-training) are scored in full with weight --lm-weight.
  * optimisation: AdamW from the base weights (fp32 master, bf16 autocast), warm-up then cosine decay over the
    wall-clock budget, as train.py. The chat loss is logged on dialogues about terms the training never saw
    (held-out) and on a fixed sample of training dialogues (seen); the final weights are exported (--export
    best: those with the lowest held-out loss, which stops before the training facts are learnt).
  * output: WORK/hf/chat (bf16 HF folder, with tokenizer and chat template), then reloaded for bits per byte on
    valid.txt (eval_bpb.py's definition) and greedy transcripts of fixed and held-out questions, all recorded in
    training.json.
"""
import time

T_START = time.time()

import argparse  # noqa: E402
import collections  # noqa: E402
import gzip  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import os  # noqa: E402
import random  # noqa: E402
import sys  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import train  # noqa: E402
from train import BOS, EOS, EOT, log  # noqa: E402

IGNORE = -100
FIXED_QUESTIONS = ["Hello", "Who are you?", "What does happy mean?", "What is a dog?", "Define river.",
                   "What is another word for big?", "What does the ls command do?",
                   "How do I copy files and directories?", "What is grep used for?", "What is a compiler?",
                   "What does the malloc function do?", "Thank you"]


class ChatEncoder:
    """Dialogue -> (ids, labels) exactly as the chat template renders it (checked against encoding the whole
    rendered text), labels only on the assistant's content and <|eot_id|>."""

    def __init__(self, tok):
        self.tok = tok
        self.bos, self.eot = tok.token_to_id(BOS), tok.token_to_id(EOT)
        self.sh, self.eh = tok.token_to_id("<|start_header_id|>"), tok.token_to_id("<|end_header_id|>")
        self.newlines = tok.encode("\n\n", add_special_tokens=False).ids

    def header(self, role):
        return [self.sh] + self.tok.encode(role, add_special_tokens=False).ids + [self.eh] + self.newlines

    def render_text(self, messages, add_generation_prompt=False):
        text = BOS + "".join(f"<|start_header_id|>{m['role']}<|end_header_id|>\n\n{m['content'].strip()}{EOT}"
                             for m in messages)
        return text + ("<|start_header_id|>assistant<|end_header_id|>\n\n" if add_generation_prompt else "")

    def encode(self, messages):
        contents = self.tok.encode_batch([m["content"].strip() for m in messages], add_special_tokens=False)
        ids, labels = [self.bos], [IGNORE]
        for m, enc in zip(messages, contents):
            head = self.header(m["role"])
            body = enc.ids + [self.eot]
            ids += head + body
            labels += [IGNORE] * len(head) + (body if m["role"] == "assistant" else [IGNORE] * len(body))
        return ids, labels

    def check(self, dialogues):
        for d in dialogues:
            whole = self.tok.encode(self.render_text(d["messages"]), add_special_tokens=False).ids
            if whole != self.encode(d["messages"])[0]:
                raise ValueError(f"piecewise encoding differs from the rendered template: {d['messages']}")


def read_dialogues(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def encode_all(enc, dialogues, seq_len):
    out = [enc.encode(d["messages"]) for d in dialogues]
    kept = [(np.asarray(i, dtype=np.int64), np.asarray(l, dtype=np.int64)) for i, l in out if len(i) <= seq_len + 1]
    log(f"dialogues: {len(dialogues):,} -> {len(kept):,} within {seq_len + 1} tokens; "
        f"{sum(len(i) for i, _ in kept):,} tokens, {sum((l != IGNORE).sum() for _, l in kept):,} scored")
    return kept


def chat_batch(items, pad_id, device):
    """Right-padded (inputs, targets): targets are the labels shifted by one, IGNORE past each dialogue."""
    width = max(len(i) for i, _ in items) - 1
    x = torch.full((len(items), width), pad_id, dtype=torch.long)
    y = torch.full((len(items), width), IGNORE, dtype=torch.long)
    for r, (ids, labels) in enumerate(items):
        x[r, :len(ids) - 1] = torch.from_numpy(ids[:-1])
        y[r, :len(ids) - 1] = torch.from_numpy(labels[1:])
    return x.to(device), y.to(device)


def chat_loss(model, x, y):
    with train.autocast(x.device.type):
        logits = model(input_ids=x, use_cache=False).logits
    return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), y.reshape(-1), ignore_index=IGNORE)


def valid_chat_loss(model, items, pad_id, device, batch=64):
    model.eval()
    total, n = 0.0, 0
    with torch.no_grad():
        for i in range(0, len(items), batch):
            x, y = chat_batch(items[i:i + batch], pad_id, device)
            k = int((y != IGNORE).sum())
            total += float(chat_loss(model, x, y)) * k
            n += k
    model.train()
    return total / max(n, 1)


def greedy_reply(model, enc, messages, device, max_new=80):
    ids = enc.tok.encode(enc.render_text(messages, add_generation_prompt=True), add_special_tokens=False).ids
    x = torch.tensor([ids], device=device)
    with torch.no_grad():
        out = model.generate(x, max_new_tokens=max_new, do_sample=False, eos_token_id=[enc.eot],
                             pad_token_id=enc.tok.token_to_id(EOS))
    reply = out[0, len(ids):].tolist()
    if reply and reply[-1] == enc.eot:
        reply = reply[:-1]
    return enc.tok.decode(reply, skip_special_tokens=False)


def first_questions(dialogues, n):
    return [d["messages"][0]["content"] for d in dialogues if d["messages"][0]["role"] == "user"][:n]


def transcripts(out_dir, data, device):
    """Greedy replies to the fixed questions, to 8 about held-out terms and to 8 seen in training."""
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained(out_dir, dtype=torch.float32).to(device).eval()
    result = []
    for kind, questions in (("fixed", FIXED_QUESTIONS), ("held_out", first_questions(data.valid_dialogues, 8)),
                            ("seen", first_questions(data.seen_dialogues, 8))):
        for q in questions:
            a = greedy_reply(model, data.enc, [{"role": "user", "content": q}], device)
            result.append({"user": q, "assistant": a, "kind": kind})
            log(f"chat ({kind}): {q!r} -> {a!r}")
    return result


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base", required=True, help="the base model's HF folder (models/drift-llama-15m)")
    ap.add_argument("--corpus", default=os.path.join(train.REPO, ".corpus"))
    ap.add_argument("--work", default="/tmp/drift-chat")
    ap.add_argument("--out", default=None, help="HF folder (default WORK/hf/chat)")
    ap.add_argument("--seq-len", type=int, default=512)
    ap.add_argument("--batch-size", type=int, default=128, help="dialogues per step")
    ap.add_argument("--lm-batch-size", type=int, default=32, help="corpus windows per step")
    ap.add_argument("--lm-weight", type=float, default=0.5)
    ap.add_argument("--lr", type=float, default=6e-4)
    ap.add_argument("--min-lr-ratio", type=float, default=0.1)
    ap.add_argument("--warmup-steps", type=int, default=100)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--grad-clip", type=float, default=1.0)
    ap.add_argument("--minutes", type=float, default=7.0, help="wall-clock budget of this process, from its start")
    ap.add_argument("--reserve-seconds", type=float, default=100.0, help="kept for export, evaluation, transcripts")
    ap.add_argument("--eval-every-seconds", type=float, default=45.0)
    ap.add_argument("--export", choices=["final", "best"], default="final",
                    help="the final weights, or those with the lowest held-out chat loss (which stops learning "
                         "the training facts early: questions about held-out terms can only be answered from "
                         "pre-training)")
    ap.add_argument("--max-steps", type=int, default=0)
    ap.add_argument("--valid-max-bytes", type=int, default=0, help="bits per byte on a prefix of valid.txt")
    ap.add_argument("--max-dialogues", type=int, default=0, help="use only this many (smoke tests)")
    ap.add_argument("--save-dtype", choices=["bfloat16", "float32"], default="bfloat16")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--device", default=None)
    args = ap.parse_args(argv)
    args.max_position = 0  # write_hf_folder's model_max_length: the training length
    return args


Data = collections.namedtuple("Data", "enc train_items valid_items seen_items valid_dialogues seen_dialogues corpus")


def load_data(args, tok, tok_path, device):
    """Training and held-out dialogues, a fixed sample of training dialogues (\"seen\") of the held-out set's
    size, and the corpus tokens for the language-model loss."""
    enc = ChatEncoder(tok)
    train_d = read_dialogues(os.path.join(args.corpus, "chat_train.jsonl.gz"))
    valid_d = read_dialogues(os.path.join(args.corpus, "chat_valid.jsonl"))
    if args.max_dialogues:
        train_d, valid_d = train_d[:args.max_dialogues], valid_d[:max(args.max_dialogues // 20, 8)]
    seen_d = random.Random(1).sample(train_d, len(valid_d))
    enc.check(random.Random(0).sample(train_d, min(500, len(train_d))))
    train_path = train.find_train_file(args.corpus)
    corpus = train.token_cache(args, tok, tok_path, "train",
                               lambda: train.split_docs(train.read_corpus_file(train_path)),
                               [train.file_digest(train_path), "0"])
    return Data(enc, encode_all(enc, train_d, args.seq_len), encode_all(enc, valid_d, args.seq_len),
                encode_all(enc, seen_d, args.seq_len), valid_d, seen_d,
                torch.from_numpy(corpus.astype(np.int64)).to(device))


def train_loop(args, model, opt, data, device, deadline):
    pad = data.enc.tok.token_to_id(EOS)
    corpus = data.corpus
    gen = random.Random(args.seed)
    tgen = torch.Generator(device="cpu").manual_seed(args.seed)
    t0, step, best, history = time.time(), 0, None, []
    schedule_s = max(deadline - t0, 1.0)
    last_eval = time.time()
    while time.time() < deadline and not (args.max_steps and step >= args.max_steps):
        lr = train.lr_at(step, (time.time() - t0) / schedule_s, args)
        for g in opt.param_groups:
            g["lr"] = lr
        x, y = chat_batch(gen.sample(data.train_items, args.batch_size), pad, device)
        loss_chat = chat_loss(model, x, y)
        offsets = torch.randint(0, len(corpus) - args.seq_len - 1, (args.lm_batch_size,), generator=tgen).to(device)
        lx, ly = train.batch_from(corpus, offsets, args.seq_len)
        loss_lm = chat_loss(model, lx, ly)
        loss = loss_chat + args.lm_weight * loss_lm
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), args.grad_clip)
        opt.step()
        step += 1
        if step % 50 == 0 or step == 1:
            lc, ll = loss_chat.item(), loss_lm.item()
            if not (math.isfinite(lc) and math.isfinite(ll)):
                raise FloatingPointError(f"loss is not finite at step {step}")
            log(f"step {step:5d}  chat loss {lc:.4f}  lm loss {ll:.4f}  lr {lr:.2e}")
            history.append({"step": step, "chat_loss": lc, "lm_loss": ll, "t": round(time.time() - T_START, 1)})
        if time.time() - last_eval >= args.eval_every_seconds:
            best = evaluate(model, data, pad, device, step, best, history)
            last_eval = time.time()
    return step, evaluate(model, data, pad, device, step, best, history), history


def evaluate(model, data, pad, device, step, best, history):
    """Chat loss on held-out terms and on seen dialogues now; returns the (held-out loss, seen loss, step,
    weights) with the lowest held-out loss so far."""
    held_out = valid_chat_loss(model, data.valid_items, pad, device)
    seen = valid_chat_loss(model, data.seen_items, pad, device)
    log(f"step {step:5d}  chat loss on held-out terms {held_out:.4f}, on seen dialogues {seen:.4f}")
    history.append({"step": step, "held_out_chat_loss": held_out, "seen_chat_loss": seen})
    if best is None or held_out < best[0]:
        best = (held_out, seen, step, {k: v.detach().clone() for k, v in model.state_dict().items()})
    return best


def main(argv=None):
    args = parse_args(argv)
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    random.seed(args.seed)
    torch.manual_seed(args.seed)
    from tokenizers import Tokenizer
    from transformers import AutoModelForCausalLM
    tok_path = os.path.join(args.base, "tokenizer.json")
    tok = Tokenizer.from_file(tok_path)
    train.check_tokenizer(tok)
    data = load_data(args, tok, tok_path, device)
    model = AutoModelForCausalLM.from_pretrained(args.base, dtype=torch.float32).to(device)
    model.train()
    opt = train.make_optimizer(model, args, device)
    deadline = T_START + args.minutes * 60.0 - args.reserve_seconds
    log(f"chat-tuning {args.base} ({train.count_params(model)[0]:,} parameters) until {deadline - T_START:.0f} s")
    step, best, history = train_loop(args, model, opt, data, device, deadline)
    final = next(h for h in reversed(history) if "seen_chat_loss" in h)
    exported = {"step": best[2], "held_out_chat_loss": best[0], "seen_chat_loss": best[1]} \
        if args.export == "best" else final
    if args.export == "best":
        model.load_state_dict(best[3])
    log(f"exporting the weights of step {exported['step']} after {step} steps: {exported}")
    out_dir = args.out or os.path.join(args.work, "hf", "chat")
    meta = {"base": os.path.abspath(args.base), "steps": step, "exported": exported,
            "args": vars(args), "history": history,
            "dialogues": train.read_json(os.path.join(args.corpus, "chat_manifest.json"))}
    train.write_hf_folder(model, tok, tok_path, out_dir, args, meta)
    del opt, model
    res, samples = train.reload_and_evaluate(out_dir, args.corpus, device, args)
    meta.update({"valid_bpb": res, "samples": samples, "transcripts": transcripts(out_dir, data, device)})
    with open(os.path.join(out_dir, "training.json"), "w") as f:
        json.dump(meta, f, indent=1, default=str)
    log(f"RESULT chat: valid bpb {res['bpb']:.4f}  chat loss held-out {exported['held_out_chat_loss']:.4f} "
        f"seen {exported['seen_chat_loss']:.4f}  steps {step}  -> {out_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
