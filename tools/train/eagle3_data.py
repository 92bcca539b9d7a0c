"""Data for the EAGLE-3 head: the target (a plain Llama forward from its safetensors, with hidden-state taps and
a static KV cache for batched generation), prompts from the corpus and the chat dialogues, and the target's own
continuations of them.

The target forward is written out here rather than taken from transformers so that the taps (the residual
stream ENTERING layer c; c = L: leaving the last layer, before the final norm), left-padded batched generation
and positions do not depend on a library version; check_against_transformers() compares it with
LlamaForCausalLM once per run.
"""
import gzip
import json
import os
import random
import time

import torch
import torch.nn.functional as F

import train  # read_corpus_file, find_train_file (tools/train is on sys.path: eagle3_train.py puts it there)

BOS, EOS, EOT = "<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>"


def log(msg, t0=[time.time()]):
    print(f"[{time.time() - t0[0]:7.1f}s] {msg}", flush=True)


# ---------------------------------------------------------------------------------------------------------
# the target

def load_safetensors_folder(folder):
    from safetensors.torch import load_file
    index = os.path.join(folder, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
    else:
        files = ["model.safetensors"]
    tensors = {}
    for name in files:
        tensors.update(load_file(os.path.join(folder, name)))
    return tensors


def rmsnorm(x, w, eps):
    """transformers' LlamaRMSNorm: normalise in fp32, cast back to x's dtype, scale."""
    x32 = x.float()
    return w * (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)


class TargetLM:
    """A Llama (GQA, SwiGLU, default RoPE, no biases) from an HF folder, weights in `dtype` on `device`."""

    def __init__(self, folder, device, dtype=torch.bfloat16):
        with open(os.path.join(folder, "config.json")) as f:
            cfg = json.load(f)
        self.cfg, self.device, self.dtype = cfg, device, dtype
        if cfg.get("model_type") != "llama":
            raise ValueError(f"{folder}: model_type {cfg.get('model_type')}; TargetLM implements llama")
        if cfg.get("attention_bias") or cfg.get("mlp_bias"):
            raise ValueError(f"{folder}: biases are not implemented")
        rp = cfg.get("rope_parameters") or {}
        if rp.get("rope_type", "default") != "default" or cfg.get("rope_scaling"):
            raise ValueError(f"{folder}: only default RoPE is implemented ({rp or cfg.get('rope_scaling')})")
        self.theta = float(rp.get("rope_theta", cfg.get("rope_theta", 10000.0)))
        self.H, self.L = cfg["hidden_size"], cfg["num_hidden_layers"]
        self.nh, self.nkv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
        self.hd = cfg.get("head_dim") or self.H // self.nh
        self.eps, self.V = cfg["rms_norm_eps"], cfg["vocab_size"]
        W = load_safetensors_folder(folder)

        def get(name):
            if name not in W:
                raise KeyError(f"{folder}: tensor {name} missing")
            return W[name].to(device=device, dtype=dtype)

        self.embed = get("model.embed_tokens.weight")                          # [V, H]
        self.lm_head = get("lm_head.weight") if "lm_head.weight" in W else self.embed
        if "lm_head.weight" not in W and not cfg.get("tie_word_embeddings", True):
            raise KeyError(f"{folder}: untied model without lm_head.weight")
        self.final_norm = get("model.norm.weight")
        self.layers = []
        for i in range(self.L):
            p = f"model.layers.{i}."
            self.layers.append({n: get(p + n + ".weight") for n in (
                "input_layernorm", "post_attention_layernorm", "self_attn.q_proj", "self_attn.k_proj",
                "self_attn.v_proj", "self_attn.o_proj", "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")})
        inv = 1.0 / (self.theta ** (torch.arange(0, self.hd, 2, device=device, dtype=torch.int64).float() / self.hd))
        self.inv_freq = inv                                                      # [hd/2] fp32

    def rope(self, positions):
        f = positions.float()[..., None] * self.inv_freq                        # [B, T, hd/2]
        emb = torch.cat([f, f], dim=-1)
        return emb.cos().to(self.dtype)[:, None], emb.sin().to(self.dtype)[:, None]   # [B, 1, T, hd]

    def new_cache(self, batch, length):
        shape = (batch, self.nkv, length, self.hd)
        return [(torch.zeros(shape, device=self.device, dtype=self.dtype),
                 torch.zeros(shape, device=self.device, dtype=self.dtype)) for _ in range(self.L)]

    def forward(self, ids, positions, attn_mask=None, cache=None, start=0, taps=(), logits="all"):
        """ids, positions [B, T]. Without cache: plain causal attention over these T tokens. With cache (from
        new_cache): k/v written to slots [start, start+T), attention over slots [0, start+T) with attn_mask
        bool [B, 1, T, start+T] (True = attend). taps: layer ids c (0..L) whose incoming residual stream is
        returned. logits: "all" -> [B, T, V] fp32, "last" -> [B, V], None.
        -> (logits, {c: [B, T, H]})"""
        B, T = ids.shape
        x = F.embedding(ids, self.embed)                                         # [B, T, H]
        cos, sin = self.rope(positions)
        rep = self.nh // self.nkv
        tapped = {}
        for li, w in enumerate(self.layers):
            if li in taps:
                tapped[li] = x
            h = rmsnorm(x, w["input_layernorm"], self.eps)
            q = (h @ w["self_attn.q_proj"].T).view(B, T, self.nh, self.hd).transpose(1, 2)    # [B, nh, T, hd]
            k = (h @ w["self_attn.k_proj"].T).view(B, T, self.nkv, self.hd).transpose(1, 2)   # [B, nkv, T, hd]
            v = (h @ w["self_attn.v_proj"].T).view(B, T, self.nkv, self.hd).transpose(1, 2)
            q = q * cos + rotate_half(q) * sin
            k = k * cos + rotate_half(k) * sin
            if cache is not None:
                ck, cv = cache[li]
                ck[:, :, start:start + T] = k
                cv[:, :, start:start + T] = v
                k, v = ck[:, :, :start + T], cv[:, :, :start + T]
            if cache is not None and T == 1:
                # decode: the rep query heads of a KV head become rep query rows over that head's keys (no copy
                # of the cache); query head h uses KV head h // rep, as repeat_interleave below
                o = F.scaled_dot_product_attention(q.reshape(B, self.nkv, rep, self.hd), k, v, attn_mask=attn_mask)
                o = o.reshape(B, self.nh, 1, self.hd)
            else:
                k = k.repeat_interleave(rep, dim=1)
                v = v.repeat_interleave(rep, dim=1)
                if cache is None:
                    o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
                else:
                    o = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask)
            x = x + o.transpose(1, 2).reshape(B, T, self.nh * self.hd) @ w["self_attn.o_proj"].T
            h = rmsnorm(x, w["post_attention_layernorm"], self.eps)
            x = x + (F.silu(h @ w["mlp.gate_proj"].T) * (h @ w["mlp.up_proj"].T)) @ w["mlp.down_proj"].T
        if self.L in taps:
            tapped[self.L] = x
        if logits is None:
            return None, tapped
        if logits == "last":
            x = x[:, -1]
        x = rmsnorm(x, self.final_norm, self.eps)
        return x.float() @ self.lm_head.float().T, tapped


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat([-x2, x1], dim=-1)


@torch.no_grad()
def generate(target, prompts, max_new, temperature=0.0, stop_ids=(), generator=None, pad_id=0, prefill_chunk=None):
    """Batched KV-cached generation, prompts left-padded. prompts: list of token lists; max_new: int or one per
    prompt; temperature 0: greedy. -> list of continuations (token lists, ending with the stop token if one
    came). The prefill runs in chunks of prefill_chunk query rows (default: as many as keep the attention mask,
    batch x rows x keys, under 2^30 elements: one pass for prompts of a few hundred tokens, 512-row chunks for a
    batch of 512 prompts of 4096 tokens)."""
    dev = target.device
    B = len(prompts)
    max_new = [max_new] * B if isinstance(max_new, int) else list(max_new)
    P = max(len(p) for p in prompts)
    S = P + max(max_new)
    pad = torch.tensor([P - len(p) for p in prompts], device=dev)                 # [B]
    ids = torch.full((B, P), pad_id, dtype=torch.long)
    for b, p in enumerate(prompts):
        ids[b, P - len(p):] = torch.tensor(p, dtype=torch.long)
    ids = ids.to(dev)
    slots = torch.arange(S, device=dev)
    valid = (slots[None] >= pad[:, None]) & (slots[None] < P)                     # [B, S] real prompt slots
    cache = target.new_cache(B, S)
    pos = (torch.arange(P, device=dev)[None] - pad[:, None]).clamp(min=0)        # [B, P]
    rows = prefill_chunk or max(64, (1 << 30) // (B * S))
    for c in range(0, P, rows):
        e = min(P, c + rows)
        q = torch.arange(c, e, device=dev)[:, None]                               # query slots [e-c, 1]
        # a pad query sees only itself (never an empty row); a real query sees the real slots up to itself
        m = (slots[None, :e] <= q)[None] & (valid[:, None, :e] | (slots[None, :e] == q)[None])   # [B, e-c, e]
        logits, _ = target.forward(ids[:, c:e], pos[:, c:e], m[:, None], cache, c,
                                   logits="last" if e == P else None)            # [B, V] after the last chunk
    stop = torch.tensor(sorted(set(stop_ids)) or [-1], device=dev)
    limit = torch.tensor(max_new, device=dev)
    out = torch.zeros(B, max(max_new), dtype=torch.long, device=dev)
    done = torch.zeros(B, dtype=torch.bool, device=dev)
    length = torch.zeros(B, dtype=torch.long, device=dev)
    plen = P - pad                                                                # [B] next position
    for step in range(max(max_new)):
        if temperature > 0:
            probs = torch.softmax(logits / temperature, dim=-1)
            nxt = torch.multinomial(probs, 1, generator=generator)[:, 0]
        else:
            nxt = logits.argmax(-1)
        nxt = torch.where(done, torch.full_like(nxt, pad_id), nxt)
        out[:, step] = nxt
        length = torch.where(done, length, length + 1)
        done = done | torch.isin(nxt, stop) | (step + 1 >= limit)
        if bool(done.all()):
            break
        slot = P + step
        valid[:, slot] = True
        logits, _ = target.forward(nxt[:, None], (plen + step)[:, None], valid[:, None, None, :slot + 1],
                                   cache, slot, logits="last")
    out, length = out.tolist(), length.tolist()
    return [o[:n] for o, n in zip(out, length)]


@torch.no_grad()
def check_against_transformers(folder, device, taps, prompts):
    """Compares TargetLM (fp32) with transformers' LlamaForCausalLM (fp32): logits and the taps (hidden_states[c]
    for c < L), and batched left-padded cached greedy generation with a full forward. Raises on a mismatch."""
    from transformers import LlamaForCausalLM
    ref = LlamaForCausalLM.from_pretrained(folder, dtype=torch.float32).to(device).eval()
    ours = TargetLM(folder, device, torch.float32)
    worst_logit, worst_tap = 0.0, 0.0
    for p in prompts:
        x = torch.tensor([p], device=device)
        out = ref(input_ids=x, output_hidden_states=True)
        lg, tp = ours.forward(x, torch.arange(len(p), device=device)[None], taps=tuple(taps))
        worst_logit = max(worst_logit, float((out.logits.float() - lg).abs().max()))
        for c in taps:
            if c < ours.L:
                worst_tap = max(worst_tap, float((out.hidden_states[c].float() - tp[c]).abs().max()))
    log(f"self-test: TargetLM vs transformers LlamaForCausalLM (fp32): max |logit diff| {worst_logit:.2e}, "
        f"max |tap diff| {worst_tap:.2e} over {len(prompts)} prompts")
    if worst_logit > 1e-2 or worst_tap > 1e-2:
        raise RuntimeError("TargetLM disagrees with transformers: see the differences above")
    del ref
    check_generation(ours, prompts)


@torch.no_grad()
def check_generation(ours, prompts):
    """Batched left-padded cached greedy generation must equal the argmax of a full forward of each sequence."""
    device = ours.device
    conts = generate(ours, prompts, 12, prefill_chunk=64)  # several prefill chunks, as long prompts get
    bad = 0
    for p, c in zip(prompts, conts):
        full = p + c
        lg, _ = ours.forward(torch.tensor([full], device=device), torch.arange(len(full), device=device)[None])
        want = lg[0, len(p) - 1:len(full) - 1].argmax(-1).tolist()
        bad += sum(a != b for a, b in zip(want, c))
    n = sum(len(c) for c in conts)
    log(f"self-test: batched left-padded cached greedy vs full forward: {bad} of {n} tokens differ")
    if bad > max(1, n // 20):
        raise RuntimeError("cached batched generation disagrees with the full forward")


# ---------------------------------------------------------------------------------------------------------
# prompts

def corpus_prompts(corpus_dir, tok, n, rng, min_tokens=32, max_tokens=256, max_chars=1500):
    """n prompts [BOS] + a window of 32..256 tokens of a training document, starting at a paragraph."""
    path = train.find_train_file(corpus_dir)
    text = train.read_corpus_file(path)
    docs = [d for d in text.split("\n\n\n") if len(d.strip()) > 200]
    snippets = []
    for _ in range(n):
        d = docs[rng.randrange(len(docs))]
        s = d.find("\n\n", rng.randrange(len(d)))  # the paragraph after a random character, else the start
        s = 0 if s < 0 else s + 2
        snippets.append(d[s:s + max_chars])
    bos = tok.token_to_id(BOS)
    out = []
    for enc in tok.encode_batch(snippets, add_special_tokens=False):
        ids = enc.ids
        if len(ids) < min_tokens:
            continue
        out.append([bos] + ids[:rng.randint(min_tokens, min(max_tokens, len(ids)))])
    return out, {"file": path, "documents": len(docs)}


def render_chat(messages, add_generation_prompt=True):
    """The chat template of models/drift-chat-15m (tokenizer_config.json; chat_tune.ChatEncoder.render_text)."""
    text = BOS + "".join(f"<|start_header_id|>{m['role']}<|end_header_id|>\n\n{m['content'].strip()}{EOT}"
                         for m in messages)
    return text + ("<|start_header_id|>assistant<|end_header_id|>\n\n" if add_generation_prompt else "")


def chat_prompts(corpus_dir, tok, n, rng, max_tokens=320):
    """n prompts: a training dialogue cut after one of its user turns, rendered with the generation prompt."""
    path = os.path.join(corpus_dir, "chat_train.jsonl.gz")
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path} missing: run tools/train/build_dialogues.sh (and carry .corpus)")
    with gzip.open(path, "rt", encoding="utf-8") as f:
        dialogues = [json.loads(line)["messages"] for line in f]
    texts = []
    for _ in range(n):
        msgs = dialogues[rng.randrange(len(dialogues))]
        users = [i for i, m in enumerate(msgs) if m["role"] == "user"]
        if not users:
            continue
        cut = users[rng.randrange(len(users))]
        texts.append(render_chat(msgs[:cut + 1]))
    out = [e.ids for e in tok.encode_batch(texts, add_special_tokens=False) if len(e.ids) <= max_tokens]
    return out, {"file": path, "dialogues": len(dialogues)}


def check_chat_template(folder, tok):
    """The rendering above should equal the model's own template (when transformers can apply it)."""
    try:
        from transformers import AutoTokenizer
        at = AutoTokenizer.from_pretrained(folder)
        msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": " What is a dog? "}]
        theirs = at.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
    except Exception as e:  # informative only
        log(f"note: could not render the chat template with transformers ({type(e).__name__}: {e})")
        return None
    same = theirs == render_chat(msgs)
    log(f"chat template check: {'same' if same else 'DIFFERENT'} rendering: {theirs!r}")
    if not same:  # the data would still be the target's own continuations, of slightly different prompts
        log(f"WARNING: render_chat differs from the model's chat template: {render_chat(msgs)!r}")
    return same


def make_prompt_pool(corpus_dir, tok, n, chat_share, seed):
    rng = random.Random(seed)
    n_chat = int(round(n * chat_share))
    chat, chat_meta = chat_prompts(corpus_dir, tok, n_chat, rng)
    corp, corp_meta = corpus_prompts(corpus_dir, tok, n - n_chat, rng)
    pool = [("chat", p) for p in chat] + [("corpus", p) for p in corp]
    rng.shuffle(pool)
    return pool, {"chat": chat_meta, "corpus": corp_meta, "chat_prompts": len(chat), "corpus_prompts": len(corp)}


def long_prompts(corpus_dir, work, tok, tok_path, n, rng, min_len, max_len):
    """n prompts of min_len..max_len tokens (uniform) from the corpus token stream that long_context.py trains on
    ([BOS] ids [EOS] per document, concatenated: train.py's token cache in `work`, built if missing), each from a
    document start, documents picked in proportion to their length up to max_len (a long prompt is then mostly
    one long document). Returned as numpy views of the stream (lists of 14,000 prompts of ~2,000 tokens would
    take gigabytes); generate_data turns those it uses into lists."""
    import numpy as np
    import long_context
    tokens = long_context.corpus_tokens(work, corpus_dir, tok, tok_path)
    starts, p = long_context.doc_start_sampler(*long_context.document_starts(tokens, tok.token_to_id(BOS)),
                                               max_len, len(tokens))
    if not len(starts):
        raise ValueError(f"the corpus ({len(tokens):,} tokens) has no document a {max_len}-token prompt fits after")
    g = np.random.default_rng(rng.randrange(1 << 31))
    docs = g.choice(len(starts), size=n, p=p)
    lens = g.integers(min_len, max_len + 1, size=n)
    out = [tokens[starts[d]:starts[d] + k] for d, k in zip(docs, lens)]
    return out, {"tokens_in_stream": int(len(tokens)), "documents": int(len(starts)), "min_len": min_len,
                 "max_len": max_len, "mean_len": float(lens.mean()) if n else 0.0}
