#!/usr/bin/env python3
"""Trains the bundled default models: a byte-level BPE tokenizer and a small Llama or DeepSeek-V2-style MLA
model, written as Hugging Face folders with save_pretrained.

    python3 tools/train/train.py --arch llama [--corpus .corpus] [--work /tmp/drift-train] [--minutes 9]
    python3 tools/train/train.py --arch mla   ...
    python3 tools/train/train.py --tokenizer-only

Steps, each cached under --work so that a second run skips it:
  1. tokenizer: byte-level BPE, vocab 8192 including the special tokens, Llama-3 split regex, trained on the
     first --tokenizer-mb of the training text. If tools/train/tokenizer.json exists it is used as is (commit
     the one a first run writes so that both models share it).
  2. token cache: every document encoded once as [BOS] ids [EOS]; all concatenated into a uint16 .npy.
  3. training: random 512-token windows of the stream, bf16 autocast, AdamW, linear warmup then cosine decay
     over the wall-clock budget, until --minutes (from process start) minus --reserve-seconds is reached.
  4. output: the resume checkpoint (model, optimizer, step, RNG) in --work/resume/<arch>/, then the HF folder
     --work/hf/<arch>/ (bf16 safetensors, config.json, generation_config.json, tokenizer.json,
     tokenizer_config.json with a chat template), then the folder is reloaded with AutoModelForCausalLM and
     evaluated with eval_bpb.py's definition (context 512, stride 256) on valid.txt, and a few samples printed.

Resume: --resume continues from --work/resume/<arch>/ckpt.pt (same corpus and tokenizer). The checkpoint is
about 12 bytes per parameter (fp32 weights + two Adam moments), so on a machine that keeps nothing between
calls a run must finish in one go; see README.md.
"""
import time

T_START = time.time()  # the wall-clock budget counts from here, before the heavy imports

import argparse  # noqa: E402
import copy  # noqa: E402
import hashlib  # noqa: E402
import json  # noqa: E402
import lzma  # noqa: E402
import gzip  # noqa: E402
import math  # noqa: E402
import os  # noqa: E402
import random  # noqa: E402
import sys  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)
import eval_bpb  # noqa: E402

LLAMA3_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                r"|\s*[\r\n]+|\s+(?!\S)|\s+")
SPECIAL_TOKENS = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]
BOS, EOS, EOT = "<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>"
DOC_SEP = "\n\n\n"  # corpus format: documents separated by two empty lines (see corpus_extract.py)

# A Llama-3-style chat template: BOS, then per message a role header, two newlines, the trimmed content, <|eot_id|>.
CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + (message['content'] | trim) + '<|eot_id|>' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}"
)

# Model sizes. "default" keeps the two bf16 models under 60 MB together (about 29 MB each).
PRESETS = {
    "llama": {
        "default": dict(hidden=384, layers=8, heads=6, kv_heads=2, head_dim=64, ffn=896),
        "base": dict(hidden=512, layers=8, heads=8, kv_heads=4, head_dim=64, ffn=1536),
        "tiny": dict(hidden=64, layers=2, heads=4, kv_heads=2, head_dim=16, ffn=128),
    },
    "mla": {
        "default": dict(hidden=384, layers=8, heads=8, ffn=896, kv_lora_rank=128, qk_nope_head_dim=32,
                        qk_rope_head_dim=16, v_head_dim=32),
        "base": dict(hidden=512, layers=8, heads=8, ffn=1536, kv_lora_rank=128, qk_nope_head_dim=32,
                     qk_rope_head_dim=16, v_head_dim=32),
        "tiny": dict(hidden=64, layers=2, heads=4, ffn=128, kv_lora_rank=32, qk_nope_head_dim=16,
                     qk_rope_head_dim=8, v_head_dim=16),
    },
}


def log(msg):
    print(f"[{time.time() - T_START:7.1f}s] {msg}", flush=True)


# ---------------------------------------------------------------------------------------------------------
# corpus and tokenizer

def read_corpus_file(path):
    opener = lzma.open if path.endswith(".xz") else gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        return f.read().decode("utf-8")


def find_train_file(corpus_dir):
    for name in ("train.txt.xz", "train.txt.gz", "train.txt"):
        p = os.path.join(corpus_dir, name)
        if os.path.exists(p):
            return p
    raise FileNotFoundError(f"no train.txt[.xz|.gz] in {corpus_dir}: run tools/train/build_corpus.sh first")


def split_docs(text):
    return [d for d in text.split(DOC_SEP) if d.strip()]


def train_tokenizer(docs, vocab_size, max_bytes):
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), min_frequency=2)
    sample, size = [], 0
    for d in docs:
        if size >= max_bytes:
            break
        sample.append(d)
        size += len(d)
    tok.train_from_iterator(sample, trainer=trainer)
    bos = tok.token_to_id(BOS)
    tok.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", pair=f"{BOS} $A {BOS} $B", special_tokens=[(BOS, bos)])
    return tok


def get_tokenizer(args, docs_fn):
    """The committed tools/train/tokenizer.json (or --tokenizer), else the one cached in --work, else a new
    one trained on the corpus. --retrain-tokenizer forces training."""
    from tokenizers import Tokenizer
    if not args.retrain_tokenizer and args.tokenizer and os.path.exists(args.tokenizer):
        log(f"tokenizer: using {args.tokenizer}")
        return Tokenizer.from_file(args.tokenizer), args.tokenizer
    path = os.path.join(args.work, "tokenizer.json")
    if os.path.exists(path) and not args.retrain_tokenizer:
        log(f"tokenizer: using cached {path}")
        return Tokenizer.from_file(path), path
    log(f"tokenizer: training byte-level BPE, vocab {args.vocab_size}, on {args.tokenizer_mb} MB of text")
    tok = train_tokenizer(docs_fn(), args.vocab_size, int(args.tokenizer_mb * 1e6))
    tok.save(path)
    log(f"tokenizer: {tok.get_vocab_size()} tokens -> {path}")
    return tok, path


def check_tokenizer(tok):
    for t in SPECIAL_TOKENS:
        if tok.token_to_id(t) is None:
            raise ValueError(f"tokenizer lacks special token {t}")
    text = "Hello world! The quick brown fox, naïve café — 1234567."
    ids = tok.encode(text, add_special_tokens=False).ids
    back = tok.decode(ids, skip_special_tokens=False)
    if back != text:
        raise ValueError(f"tokenizer round trip failed: {text!r} -> {back!r}")
    with_bos = tok.encode(text).ids
    if with_bos[0] != tok.token_to_id(BOS) or with_bos[1:] != ids:
        raise ValueError("tokenizer post-processor does not prepend BOS")


def file_digest(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def encode_docs(tok, docs, batch=2000):
    bos, eos = tok.token_to_id(BOS), tok.token_to_id(EOS)
    parts = []
    for i in range(0, len(docs), batch):
        for enc in tok.encode_batch(docs[i:i + batch], add_special_tokens=False):
            parts.append(np.asarray([bos] + enc.ids + [eos], dtype=np.uint16))
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.uint16)


def token_cache(args, tok, tok_path, name, docs_fn, key_parts):
    key = hashlib.sha256("|".join([file_digest(tok_path)] + key_parts).encode()).hexdigest()[:16]
    path = os.path.join(args.work, "cache", f"{name}-{key}.npy")
    if os.path.exists(path):
        arr = np.load(path)
        log(f"tokens: {name} from cache {path}: {len(arr):,}")
        return arr
    docs = docs_fn()
    arr = encode_docs(tok, docs)
    assert tok.get_vocab_size() <= 65536
    os.makedirs(os.path.dirname(path), exist_ok=True)
    np.save(path + ".tmp.npy", arr)
    os.replace(path + ".tmp.npy", path)
    log(f"tokens: {name}: {len(docs):,} documents -> {len(arr):,} tokens -> {path}")
    return arr


# ---------------------------------------------------------------------------------------------------------
# models

def padded_vocab(tok, multiple=64):
    n = tok.get_vocab_size()
    return (n + multiple - 1) // multiple * multiple


def build_config(arch, size, tok, max_position):
    """(config, the MoE-field variant accepted, the model if it was already built to check the variant)."""
    common = dict(
        vocab_size=padded_vocab(tok), hidden_size=size["hidden"], intermediate_size=size["ffn"],
        num_hidden_layers=size["layers"], num_attention_heads=size["heads"], hidden_act="silu",
        max_position_embeddings=max_position, rms_norm_eps=1e-5, initializer_range=0.02, tie_word_embeddings=True,
        attention_bias=False, bos_token_id=tok.token_to_id(BOS),
        eos_token_id=[tok.token_to_id(EOS), tok.token_to_id(EOT)],
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
    )
    if arch == "llama":
        from transformers import LlamaConfig
        return LlamaConfig(num_key_value_heads=size["kv_heads"], head_dim=size["head_dim"], mlp_bias=False,
                           **common), {}, None
    # DeepSeek-V2 attention (MLA, no query compression) with a dense SwiGLU MLP in every layer: with
    # first_k_dense_replace = num_hidden_layers no layer is MoE. The MoE fields are set to None where the
    # config class accepts it, else left at the class defaults (unused). The model is checked for expert
    # weights after construction.
    from transformers import DeepseekV2Config
    mla = dict(q_lora_rank=None, kv_lora_rank=size["kv_lora_rank"], qk_nope_head_dim=size["qk_nope_head_dim"],
               qk_rope_head_dim=size["qk_rope_head_dim"], v_head_dim=size["v_head_dim"],
               num_key_value_heads=size["heads"], first_k_dense_replace=size["layers"])
    variants = [
        dict(n_routed_experts=None, n_shared_experts=None, num_experts_per_tok=None),
        dict(),
        dict(mlp_layer_types=["dense"] * size["layers"]),
    ]
    errors = []
    for extra in variants:
        try:
            cfg = DeepseekV2Config(**common, **mla, **extra)
            if cfg.first_k_dense_replace != size["layers"] or cfg.q_lora_rank is not None:
                raise ValueError("the config did not keep first_k_dense_replace / q_lora_rank")
            model = build_model("mla", cfg)
        except Exception as e:  # e.g. a strict config class refusing None for an int field
            errors.append(f"{extra}: {type(e).__name__}: {e}")
            continue
        return cfg, extra, model
    raise RuntimeError("could not build a dense DeepseekV2 model:\n  " + "\n  ".join(errors))


def make_model(arch, size, tok, max_position):
    """(model, the MoE-field variant used): Llama directly; DeepseekV2 by trying the config variants."""
    cfg, extra, model = build_config(arch, size, tok, max_position)
    if model is None:
        model = build_model(arch, cfg)
    return model, extra


def build_model(arch, cfg):
    if arch == "llama":
        from transformers import LlamaForCausalLM as Cls
    else:
        from transformers import DeepseekV2ForCausalLM as Cls
    model = Cls(cfg)
    names = [n for n, _ in model.named_parameters()]
    moe = [n for n in names if ".experts" in n or ".mlp.gate." in n or "shared_experts" in n]
    if moe:
        raise RuntimeError(f"{arch}: the model has MoE weights ({moe[:3]} ...); the MLP must be dense")
    if arch == "mla":
        need = ["model.layers.0.self_attn.q_proj.weight", "model.layers.0.self_attn.kv_a_proj_with_mqa.weight",
                "model.layers.0.self_attn.kv_a_layernorm.weight", "model.layers.0.self_attn.kv_b_proj.weight",
                "model.layers.0.mlp.gate_proj.weight"]
        missing = [n for n in need if n not in names]
        if missing:
            raise RuntimeError(f"mla: expected weights missing: {missing}")
    emb, head = model.get_input_embeddings().weight, model.get_output_embeddings().weight
    if emb.data_ptr() != head.data_ptr():
        log("warning: lm_head was not tied to embed_tokens after construction; tying it")
        model.get_output_embeddings().weight = emb
    return model


def count_params(model):
    total = sum(p.numel() for p in model.parameters())  # parameters() yields a tied tensor once
    emb = model.get_input_embeddings().weight.numel()
    return total, total - emb


# ---------------------------------------------------------------------------------------------------------
# training

def lr_at(step, frac, args):
    if step < args.warmup_steps:
        return args.lr * (step + 1) / args.warmup_steps
    f = min(max(frac, 0.0), 1.0)
    lo = args.lr * args.min_lr_ratio
    return lo + 0.5 * (args.lr - lo) * (1.0 + math.cos(math.pi * f))


def make_optimizer(model, args, device):
    decay, no_decay = [], []
    for n, p in model.named_parameters():
        (decay if p.dim() >= 2 else no_decay).append(p)
    groups = [{"params": decay, "weight_decay": args.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    kwargs = dict(lr=args.lr, betas=(0.9, 0.95), eps=1e-8)
    if device == "cuda":
        try:
            return torch.optim.AdamW(groups, fused=True, **kwargs)
        except (TypeError, RuntimeError):
            pass
    return torch.optim.AdamW(groups, **kwargs)


def batch_from(data, offsets, seq_len):
    idx = offsets[:, None] + torch.arange(seq_len + 1, device=data.device)[None, :]
    chunk = data[idx]
    return chunk[:, :-1], chunk[:, 1:]


def autocast(device):
    if device == "cuda":
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return torch.autocast("cpu", enabled=False)


def quick_val(model, vdata, offsets, seq_len, device, batch=32):
    model.eval()
    total, n = 0.0, 0
    with torch.no_grad():
        for i in range(0, len(offsets), batch):
            x, y = batch_from(vdata, offsets[i:i + batch], seq_len)
            with autocast(device):
                logits = model(input_ids=x, use_cache=False).logits
            loss = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), y.reshape(-1), reduction="sum")
            total += float(loss)
            n += y.numel()
    model.train()
    return total / max(n, 1)


def rng_state():
    st = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        st["cuda"] = torch.cuda.get_rng_state_all()
    return st


def set_rng_state(st):
    random.setstate(st["python"])
    np.random.set_state(st["numpy"])
    torch.set_rng_state(st["torch"])
    if "cuda" in st and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(st["cuda"])


# ---------------------------------------------------------------------------------------------------------
# output

def write_hf_folder(raw_model, tok, tok_path, out_dir, args, extra_meta):
    import shutil
    if os.path.exists(out_dir):
        shutil.rmtree(out_dir)
    os.makedirs(out_dir)
    # a converted copy, so that the training model (and its fp32 buffers) stay as they are
    try:
        export, in_place = copy.deepcopy(raw_model), False
    except Exception as e:  # some attribute refuses deepcopy: convert in place and convert back after
        log(f"note: deepcopy of the model failed ({type(e).__name__}: {e}); converting in place")
        export, in_place = raw_model, True
        backup = {k: v.detach().clone() for k, v in raw_model.state_dict().items()}
    export.eval()
    if args.save_dtype == "bfloat16":
        export.to(torch.bfloat16)
    export.config.use_cache = True
    export.save_pretrained(out_dir)
    if in_place:
        raw_model.to(torch.float32)
        raw_model.load_state_dict(backup)
        raw_model.train()
    del export
    shutil.copyfile(tok_path, os.path.join(out_dir, "tokenizer.json"))
    tok_cfg = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": BOS, "eos_token": EOS, "pad_token": EOS,
        "model_max_length": args.max_position or args.seq_len,
        "clean_up_tokenization_spaces": False,
        "chat_template": CHAT_TEMPLATE,
    }
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w") as f:
        json.dump(tok_cfg, f, indent=1, ensure_ascii=False)
    import transformers
    gen = {"bos_token_id": tok.token_to_id(BOS), "eos_token_id": [tok.token_to_id(EOS), tok.token_to_id(EOT)],
           "do_sample": True, "temperature": 0.8, "top_p": 0.95, "transformers_version": transformers.__version__}
    with open(os.path.join(out_dir, "generation_config.json"), "w") as f:
        json.dump(gen, f, indent=1)
    with open(os.path.join(out_dir, "training.json"), "w") as f:
        json.dump(extra_meta, f, indent=1, default=str)
    files = sorted(os.listdir(out_dir))
    if not any(n.endswith(".safetensors") for n in files):
        raise RuntimeError(f"save_pretrained wrote no .safetensors file in {out_dir}: {files}")
    size = sum(os.path.getsize(os.path.join(out_dir, n)) for n in files)
    log(f"saved {out_dir}: {files} ({size / 1e6:.1f} MB)")


def reload_and_evaluate(out_dir, corpus_dir, device, args):
    tok = eval_bpb.load_tokenizer(out_dir)
    model = eval_bpb.load_model(out_dir, device, "float32")
    log(f"reloaded {out_dir} with AutoModelForCausalLM: {type(model).__name__}")
    with open(os.path.join(corpus_dir, "valid.txt"), "rb") as f:
        text = f.read().decode("utf-8")
    if args.valid_max_bytes:
        text = text.encode("utf-8")[:args.valid_max_bytes].decode("utf-8", "ignore")
    res = eval_bpb.evaluate_text(model, tok, eval_bpb.bos_id(out_dir, tok), text, args.seq_len,
                                 args.seq_len // 2, 16, device)
    log(f"validation (sliding window context {args.seq_len}, stride {args.seq_len // 2}): "
        f"loss/token {res['loss_per_token']:.4f}  ppl {res['ppl']:.2f}  bpb {res['bpb']:.4f}  "
        f"({res['scored_tokens']:,} tokens, {res['bytes']:,} bytes, {res['seconds']:.1f}s)")
    with open(os.path.join(out_dir, "eval_bpb.json"), "w") as f:
        json.dump(res, f, indent=1)
    samples = []
    bos = eval_bpb.bos_id(out_dir, tok)
    stop = {tok.token_to_id(EOS), tok.token_to_id(EOT)}
    g = torch.Generator(device="cpu").manual_seed(0)
    for prompt in ["The", "In the beginning", "A dictionary is", "To install the package, "]:
        ids = [bos] + tok.encode(prompt, add_special_tokens=False).ids
        with torch.no_grad():
            for _ in range(60):
                x = torch.tensor([ids[-args.seq_len:]], device=device)
                logits = model(input_ids=x, use_cache=False).logits[0, -1].float().cpu() / 0.8
                probs = torch.softmax(logits, -1)
                nxt = int(torch.multinomial(probs, 1, generator=g))
                if nxt in stop:
                    break
                ids.append(nxt)
        text_out = tok.decode(ids[1:], skip_special_tokens=False)
        samples.append(text_out)
        log(f"sample: {text_out!r}")
    try:
        from transformers import AutoTokenizer
        at = AutoTokenizer.from_pretrained(out_dir)
        chat = at.apply_chat_template([{"role": "user", "content": "Hello"}], tokenize=False,
                                      add_generation_prompt=True)
        log(f"AutoTokenizer loads; chat template renders {chat!r}")
    except Exception as e:  # informative only: the engine reads tokenizer.json itself
        log(f"note: AutoTokenizer/chat template check failed: {type(e).__name__}: {e}")
    return res, samples


# ---------------------------------------------------------------------------------------------------------

def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--arch", choices=["llama", "mla"], default="llama")
    ap.add_argument("--preset", choices=["default", "base", "tiny"], default="default")
    ap.add_argument("--corpus", default=os.path.join(REPO, ".corpus"))
    ap.add_argument("--work", default="/tmp/drift-train", help="caches, resume checkpoints, HF output")
    ap.add_argument("--out", default=None, help="HF folder (default WORK/hf/ARCH)")
    ap.add_argument("--tokenizer", default=os.path.join(HERE, "tokenizer.json"),
                    help="use this tokenizer.json if it exists (default tools/train/tokenizer.json)")
    ap.add_argument("--retrain-tokenizer", action="store_true")
    ap.add_argument("--tokenizer-only", action="store_true", help="train the tokenizer and token caches, then stop")
    ap.add_argument("--vocab-size", type=int, default=8192)
    ap.add_argument("--tokenizer-mb", type=float, default=40.0)
    ap.add_argument("--max-train-bytes", type=int, default=0, help="use only this much training text (smoke tests)")
    ap.add_argument("--valid-max-bytes", type=int, default=0, help="evaluate on a prefix of valid.txt (smoke tests)")
    ap.add_argument("--seq-len", type=int, default=512)
    ap.add_argument("--max-position", type=int, default=0,
                    help="max_position_embeddings written to config.json (default: --seq-len)")
    ap.add_argument("--batch-size", type=int, default=128, help="sequences per step")
    ap.add_argument("--lr", type=float, default=1.5e-3)
    ap.add_argument("--min-lr-ratio", type=float, default=0.1)
    ap.add_argument("--warmup-steps", type=int, default=300)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--grad-clip", type=float, default=1.0)
    ap.add_argument("--minutes", type=float, default=9.0, help="wall-clock budget of this process, from its start")
    ap.add_argument("--reserve-seconds", type=float, default=60.0,
                    help="time kept back from --minutes for saving and the final evaluation")
    ap.add_argument("--total-train-minutes", type=float, default=0.0,
                    help="length of the LR schedule in training minutes summed over resumed runs "
                         "(default: what this run has)")
    ap.add_argument("--max-steps", type=int, default=0, help="stop after this many steps (0: time only)")
    ap.add_argument("--resume", action="store_true")
    ap.add_argument("--no-checkpoint", action="store_true", help="do not write the resume checkpoint")
    ap.add_argument("--compile", action="store_true", help="torch.compile the model")
    ap.add_argument("--eval-every-seconds", type=float, default=60.0)
    ap.add_argument("--log-every", type=int, default=50)
    ap.add_argument("--save-dtype", choices=["bfloat16", "float32"], default="bfloat16")
    ap.add_argument("--keep-best", action=argparse.BooleanOptionalAction, default=True,
                    help="export the weights with the lowest periodic validation loss if the final ones are worse")
    ap.add_argument("--best-margin", type=float, default=0.01,
                    help="how much lower (nats/token) the best validation loss must be to replace the final weights")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--device", default=None)
    return ap.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    deadline = T_START + args.minutes * 60.0
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    os.makedirs(args.work, exist_ok=True)
    out_dir = args.out or os.path.join(args.work, "hf", args.arch)
    ckpt_dir = os.path.join(args.work, "resume", args.arch)
    import transformers
    import tokenizers
    log(f"torch {torch.__version__}, transformers {transformers.__version__}, tokenizers {tokenizers.__version__}, "
        f"device {device}" + (f" ({torch.cuda.get_device_name()})" if device == "cuda" else ""))
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)

    # --- data
    train_path = find_train_file(args.corpus)
    corpus_key = [file_digest(train_path), str(args.max_train_bytes)]
    _docs = {}

    def train_docs():
        if "train" not in _docs:
            text = read_corpus_file(train_path)
            if args.max_train_bytes:
                text = text[:args.max_train_bytes]
            _docs["train"] = split_docs(text)
            log(f"corpus: {train_path}: {len(text):,} characters, {len(_docs['train']):,} documents")
        return _docs["train"]

    def valid_docs():
        with open(os.path.join(args.corpus, "valid.txt"), "rb") as f:
            return split_docs(f.read().decode("utf-8"))

    tok, tok_path = get_tokenizer(args, train_docs)
    check_tokenizer(tok)
    tdata_np = token_cache(args, tok, tok_path, "train", train_docs, corpus_key)
    vdata_np = token_cache(args, tok, tok_path, "valid",
                           valid_docs, [file_digest(os.path.join(args.corpus, "valid.txt"))])
    _docs.clear()
    log(f"tokens: train {len(tdata_np):,}, valid {len(vdata_np):,}; vocab {tok.get_vocab_size()}")
    if args.tokenizer_only:
        return 0
    if len(tdata_np) < args.seq_len + 2 or len(vdata_np) < args.seq_len + 2:
        raise ValueError("corpus too small for one window")

    # --- model
    ckpt = None
    if args.resume:
        path = os.path.join(ckpt_dir, "ckpt.pt")
        if not os.path.exists(path):
            raise FileNotFoundError(f"--resume: no checkpoint at {path}")
        ckpt = torch.load(path, map_location="cpu", weights_only=False)
        if ckpt["tokenizer_sha256"] != file_digest(tok_path):
            raise ValueError("--resume: the tokenizer differs from the one the checkpoint was trained with")
        size = ckpt["size"]
        log(f"resume: {path} at step {ckpt['step']}, {ckpt['tokens']:,} tokens")
    else:
        size = PRESETS[args.arch][args.preset]
    model, cfg_variant = make_model(args.arch, size, tok, args.max_position or args.seq_len)
    if getattr(model.config, "_attn_implementation", None) != "sdpa":
        try:
            model.set_attn_implementation("sdpa")
        except Exception as e:  # keep whatever the default was
            log(f"note: could not select SDPA attention: {type(e).__name__}: {e}")
    model = model.to(device)
    total, non_emb = count_params(model)
    log(f"model {type(model).__name__} ({args.arch}, preset {args.preset}): {total:,} parameters "
        f"({non_emb:,} without the embedding), bf16 size {total * 2 / 1e6:.1f} MB; "
        f"attention implementation {getattr(model.config, '_attn_implementation', '?')}")
    log("config: " + model.config.to_json_string(use_diff=False).replace("\n", " "))
    if args.arch == "mla":
        log(f"DeepseekV2Config: MoE-field variant accepted: {cfg_variant}")
    model.train()
    opt = make_optimizer(model, args, device)
    step, tokens_seen, train_done_s = 0, 0, 0.0
    gen = torch.Generator(device="cpu").manual_seed(args.seed)
    if ckpt is not None:
        model.load_state_dict(ckpt["model"])
        opt.load_state_dict(ckpt["optim"])
        step, tokens_seen, train_done_s = ckpt["step"], ckpt["tokens"], ckpt["train_seconds"]
        gen.set_state(ckpt["data_rng"])
        set_rng_state(ckpt["rng"])
    fwd_model = torch.compile(model) if args.compile else model

    tdata = torch.from_numpy(tdata_np.astype(np.int64)).to(device)
    vdata = torch.from_numpy(vdata_np.astype(np.int64)).to(device)
    vgen = torch.Generator(device="cpu").manual_seed(4321)
    n_val = min(256, max(8, (len(vdata_np) - args.seq_len - 1) // args.seq_len))
    val_offsets = torch.randint(0, len(vdata_np) - args.seq_len - 1, (n_val,), generator=vgen).to(device)
    with open(os.path.join(args.corpus, "valid.txt"), "rb") as f:
        valid_bytes = len(f.read())
    tokens_per_byte = len(vdata_np) / valid_bytes  # approximate (includes BOS/EOS), for the running bpb estimate

    # --- loop
    t_train0 = time.time()
    stop_at = deadline - args.reserve_seconds
    budget_this_run = max(stop_at - t_train0, 1.0)
    schedule_s = None
    if ckpt is not None and ckpt.get("schedule_seconds"):
        schedule_s = ckpt["schedule_seconds"]
    if args.total_train_minutes > 0:
        schedule_s = args.total_train_minutes * 60.0
    if schedule_s is None:
        schedule_s = train_done_s + budget_this_run
    log(f"training: batch {args.batch_size} x {args.seq_len} tokens, lr {args.lr} (warmup {args.warmup_steps} "
        f"steps, cosine to {args.lr * args.min_lr_ratio:g} over {schedule_s:.0f} s of training), "
        f"this run stops at {stop_at - T_START:.0f} s")
    history = []
    best = None  # (quick val loss, step, weights): with many epochs over a small corpus the end may overfit
    last_eval = time.time()
    ema = None
    tok_rate_t, tok_rate_n = time.time(), 0
    n_windows = len(tdata_np) - args.seq_len - 1
    while True:
        now = time.time()
        elapsed_total = train_done_s + (now - t_train0)
        if now >= stop_at or elapsed_total >= schedule_s or (args.max_steps and step >= args.max_steps):
            break
        frac = elapsed_total / schedule_s
        lr = lr_at(step, frac, args)
        for group in opt.param_groups:
            group["lr"] = lr
        offsets = torch.randint(0, n_windows, (args.batch_size,), generator=gen).to(device)
        x, y = batch_from(tdata, offsets, args.seq_len)
        with autocast(device):
            logits = fwd_model(input_ids=x, use_cache=False).logits
        loss = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        gnorm = torch.nn.utils.clip_grad_norm_(model.parameters(), args.grad_clip)
        opt.step()
        step += 1
        tokens_seen += x.numel()
        tok_rate_n += x.numel()
        if step % args.log_every == 0 or step == 1:
            lv = float(loss)
            if not math.isfinite(lv):
                raise FloatingPointError(f"loss is {lv} at step {step}")
            ema = lv if ema is None else 0.9 * ema + 0.1 * lv
            rate = tok_rate_n / max(time.time() - tok_rate_t, 1e-6)
            tok_rate_t, tok_rate_n = time.time(), 0
            log(f"step {step:6d}  loss {lv:.4f} (ema {ema:.4f})  lr {lr:.2e}  gnorm {float(gnorm):.2f}  "
                f"{rate / 1e3:,.0f}k tok/s  {tokens_seen / 1e6:,.1f}M tokens  "
                f"epoch {tokens_seen / len(tdata_np):.2f}")
            history.append({"step": step, "loss": lv, "lr": lr, "tokens": tokens_seen,
                            "t": round(time.time() - T_START, 1)})
        if time.time() - last_eval >= args.eval_every_seconds:
            vl = quick_val(fwd_model, vdata, val_offsets, args.seq_len, device)
            log(f"step {step:6d}  val loss {vl:.4f}  (~{vl * tokens_per_byte / math.log(2):.3f} bpb, "
                f"windows without sliding)")
            history.append({"step": step, "val_loss": vl, "tokens": tokens_seen, "t": round(time.time() - T_START, 1)})
            if args.keep_best and (best is None or vl < best[0]):
                best = (vl, step, {k: v.detach().clone() for k, v in model.state_dict().items()})
            last_eval = time.time()
    train_done_s += time.time() - t_train0
    log(f"training done: {step} steps, {tokens_seen:,} tokens ({tokens_seen / len(tdata_np):.2f} epochs), "
        f"{train_done_s:.0f} s of training in total")
    vl = quick_val(fwd_model, vdata, val_offsets, args.seq_len, device)
    log(f"final quick val loss {vl:.4f}")

    meta = {"arch": args.arch, "preset": args.preset, "size": size, "parameters": total, "steps": step,
            "tokens": tokens_seen, "train_seconds": train_done_s, "schedule_seconds": schedule_s,
            "train_tokens_in_corpus": int(len(tdata_np)), "quick_val_loss": vl, "args": vars(args),
            "torch": torch.__version__, "transformers": transformers.__version__,
            "corpus_manifest": _read_manifest(args.corpus), "history": history}

    def save_checkpoint(model, opt):
        if args.no_checkpoint:
            return
        os.makedirs(ckpt_dir, exist_ok=True)
        ck = {"model": model.state_dict(), "optim": opt.state_dict(), "step": step, "tokens": tokens_seen,
              "train_seconds": train_done_s, "schedule_seconds": schedule_s, "size": size, "arch": args.arch,
              "data_rng": gen.get_state(), "rng": rng_state(), "tokenizer_sha256": file_digest(tok_path),
              "args": vars(args)}
        torch.save(ck, os.path.join(ckpt_dir, "ckpt.pt.tmp"))
        os.replace(os.path.join(ckpt_dir, "ckpt.pt.tmp"), os.path.join(ckpt_dir, "ckpt.pt"))
        log(f"resume checkpoint: {os.path.join(ckpt_dir, 'ckpt.pt')} "
            f"({os.path.getsize(os.path.join(ckpt_dir, 'ckpt.pt')) / 1e6:.0f} MB)")

    restore = best is not None and best[0] < vl - args.best_margin
    meta["exported_step"] = best[1] if restore else step
    if restore:
        save_checkpoint(model, opt)  # the checkpoint continues from the last step, the export takes the best weights
        model.load_state_dict(best[2])
        log(f"the quick val loss was lowest at step {best[1]} ({best[0]:.4f} < final {vl:.4f}): "
            f"exporting those weights")
    best = None
    # the HF folder before the (optional) checkpoint: it is what matters if the process is killed later
    write_hf_folder(model, tok, tok_path, out_dir, args, meta)
    if not restore:
        save_checkpoint(model, opt)
    # 3. the folder as the engine will read it: reload, bits per byte, samples
    del fwd_model, opt
    if device == "cuda":
        torch.cuda.empty_cache()
    res, samples = reload_and_evaluate(out_dir, args.corpus, device, args)
    meta.update({"valid_bpb": res, "samples": samples})
    with open(os.path.join(out_dir, "training.json"), "w") as f:
        json.dump(meta, f, indent=1, default=str)
    log(f"RESULT {args.arch}: params {total:,}  valid bpb {res['bpb']:.4f}  loss/token {res['loss_per_token']:.4f}  "
        f"steps {step}  tokens {tokens_seen:,}  -> {out_dir}")
    return 0


def read_json(path):
    """The JSON in `path`, or None when it is missing or unreadable (the records are informative only)."""
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def _read_manifest(corpus_dir):
    m = read_json(os.path.join(corpus_dir, "manifest.json"))
    return {k: m.get(k) for k in ("recipe_version", "train", "valid")} if isinstance(m, dict) else None


if __name__ == "__main__":
    sys.exit(main())
