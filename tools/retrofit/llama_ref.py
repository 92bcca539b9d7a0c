"""A Llama/Qwen2-style GQA decoder in plain PyTorch with the retrofits the engine runs (the same math as
src/model/layers/mla_lite_attention.h and dsa_indexer.h), so that only the new weights train:

- MLA-lite: partial RoPE (the kept frequencies' K features, rotated) plus one d_c latent per token,
  k_nope = k_up c and v = v_up c. Trained in the unabsorbed form, which is the same function as the engine's
  absorbed one. Optionally the retrofit also carries a low-rank query adapter (q_proj + q_up q_down) and its
  own kept K rows (k_rope, from k_proj's; per KV head or one shared RoPE key): new weights that let the
  frozen model's queries and positional keys adapt to the RoPE the latent dropped; the engine folds both at
  load, so they cost nothing at run time.
- DSA-lite: per layer an indexer, I[t, s] = sum_j w_j(x_t) relu(q_j(x_t) . k(x_s)); each query keeps the
  first `sink` positions, the last `window` up to itself and the best others until `top_k` (ties: the lower
  position), and attends over those only.
"""
import json
import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

import st_io


class Config:
    def __init__(self, folder):
        with open(os.path.join(folder, "config.json")) as f:
            c = json.load(f)
        self.hidden = c["hidden_size"]
        self.layers = c["num_hidden_layers"]
        self.heads = c["num_attention_heads"]
        self.kv_heads = c.get("num_key_value_heads", self.heads)
        self.head_dim = c.get("head_dim") or self.hidden // self.heads
        self.eps = c.get("rms_norm_eps", 1e-6)
        self.vocab = c["vocab_size"]
        self.tied = c.get("tie_word_embeddings", False)
        rope = c.get("rope_parameters") or c.get("rope_scaling") or {}
        self.rope = rope
        self.rope_type = rope.get("rope_type", rope.get("type", "default"))
        if self.rope_type not in ("default", "llama3"):
            raise SystemExit(f"{folder}: rope_type {self.rope_type} is not handled by tools/retrofit (default, llama3)")
        self.theta = rope.get("rope_theta", c.get("rope_theta", 10000.0))
        factor = rope.get("partial_rotary_factor", c.get("partial_rotary_factor", 1.0))
        self.rotary_dim = int(self.head_dim * factor)
        if c.get("attention_bias") or c.get("model_type") == "qwen3":
            raise SystemExit(f"{folder}: q/k/v biases or per-head q/k norms do not fit MLA-lite")


def inverse_frequencies(cfg):
    """As transformers computes them (default, and Llama 3's frequency-dependent scaling)."""
    inv = 1.0 / (cfg.theta ** (torch.arange(0, cfg.rotary_dim, 2, dtype=torch.float32) / cfg.rotary_dim))
    if cfg.rope_type != "llama3":
        return inv
    r = cfg.rope
    factor, low, high = r["factor"], r["low_freq_factor"], r["high_freq_factor"]
    old = r["original_max_position_embeddings"]
    wavelen = 2 * math.pi / inv
    scaled = torch.where(wavelen > old / low, inv / factor, inv)
    smooth = (old / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = ~(wavelen < old / high) & ~(wavelen > old / low)
    return torch.where(medium, smoothed, scaled)


def rope_split(cfg, freqs):
    """(rope rows, nope rows) of one head, as rope_feature_split() in mla_lite_attention.cc (halves layout)."""
    half = cfg.rotary_dim // 2
    rope = list(freqs) + [f + half for f in freqs]
    nope = [d for d in range(cfg.head_dim) if d not in set(rope)]
    return rope, nope


def rotate(x, cos, sin, rotary_dim):
    """HF Llama RoPE on the first rotary_dim features: x [B, T, heads, D], cos/sin [T, rotary_dim/2]."""
    half = rotary_dim // 2
    x1, x2, rest = x[..., :half], x[..., half:rotary_dim], x[..., rotary_dim:]
    c, s = cos[None, :, None, :], sin[None, :, None, :]
    return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s, rest], dim=-1)


def rms_norm(x, w, eps):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype) * w


class Retrofit(nn.Module):
    """The new weights: per layer kv_down/k_up/v_up (MLA-lite) and index_q/index_k/index_w (DSA-lite)."""

    def __init__(self, cfg, rank=0, freqs=(), index_heads=0, index_dim=0, top_k=0, sink=0, window=0, q_rank=0,
                 k_rope=False, shared_rope=False, index_rope=0):
        super().__init__()
        self.rank, self.freqs, self.q_rank = rank, list(freqs), q_rank
        self.top_k, self.sink, self.window = top_k, sink, window
        # oracle: select by the dense attention's head-summed probabilities instead of the indexer's scores,
        # the best any indexer could do under the same top-k rule (a bound, not a runtime mode).
        self.oracle = False
        g, d, h = cfg.kv_heads, cfg.head_dim, cfg.hidden
        nope = d - 2 * len(self.freqs)
        self.kv_down = nn.ParameterList([nn.Parameter(torch.zeros(rank, h)) for _ in range(cfg.layers)]) if rank else None
        self.k_up = nn.ParameterList([nn.Parameter(torch.zeros(g * nope, rank)) for _ in range(cfg.layers)]) if rank else None
        self.v_up = nn.ParameterList([nn.Parameter(torch.zeros(g * d, rank)) for _ in range(cfg.layers)]) if rank else None
        # The query adapter starts as no change (q_up = 0) with q_down random, as LoRA does; k_rope is set
        # from k_proj's kept rows by init.init_mla_lite.
        qa = rank and q_rank
        self.q_down = nn.ParameterList([nn.Parameter(torch.randn(q_rank, h) / math.sqrt(h))
                                        for _ in range(cfg.layers)]) if qa else None
        self.q_up = nn.ParameterList([nn.Parameter(torch.zeros(cfg.heads * d, q_rank))
                                      for _ in range(cfg.layers)]) if qa else None
        # shared_rope: one set of kept K rows for every KV head, one RoPE key cached per token (DeepSeek's form).
        self.rope_keys = 1 if shared_rope and k_rope else g
        self.k_rope = nn.ParameterList([nn.Parameter(torch.zeros(self.rope_keys * 2 * len(self.freqs), h))
                                        for _ in range(cfg.layers)]) if rank and k_rope else None
        self.index_heads, self.index_dim = index_heads, index_dim
        # index_rope: the first features of every indexer query and key rotated by position (RoPE at the model's
        # theta over that many features, halves layout), as DeepSeek-V3.2's indexer does, so that it can score
        # recency (the engine's DsaLiteConfig::index_rope).
        self.index_rope, self.index_theta = index_rope, cfg.theta
        mk = lambda rows: nn.ParameterList([nn.Parameter(torch.zeros(rows, h)) for _ in range(cfg.layers)])  # noqa: E731
        self.index_q = mk(index_heads * index_dim) if index_heads else None
        self.index_k = mk(index_dim) if index_heads else None
        self.index_w = mk(index_heads) if index_heads else None

    def mla_parameters(self):
        extra = [*(self.q_down or []), *(self.q_up or []), *(self.k_rope or [])]
        return [] if self.kv_down is None else [*self.kv_down, *self.k_up, *self.v_up, *extra]

    def index_parameters(self):
        return [] if self.index_q is None else [*self.index_q, *self.index_k, *self.index_w]

    def parameters_by_name(self):
        """{checkpoint name: parameter} for every new weight (the names of the file's format)."""
        parts = [("mla_lite.kv_down", self.kv_down), ("mla_lite.k_up", self.k_up), ("mla_lite.v_up", self.v_up),
                 ("mla_lite.q_down", self.q_down), ("mla_lite.q_up", self.q_up), ("mla_lite.k_rope", self.k_rope),
                 ("dsa_lite.index_q", self.index_q), ("dsa_lite.index_k", self.index_k),
                 ("dsa_lite.index_w", self.index_w)]
        return {f"model.layers.{i}.self_attn.{part}.weight": p
                for part, params in parts for i, p in enumerate(params or [])}

    def tensors(self):
        return {name: p.float() for name, p in self.parameters_by_name().items()}

    def load(self, path, part):
        """Copy the `part` ("mla_lite" or "dsa_lite") tensors of a file this tool wrote into this retrofit of
        the same geometry; False when the file has none of them."""
        tensors, meta = st_io.read(path)
        mine = {n: p for n, p in self.parameters_by_name().items() if f".{part}." in n}
        found = [n for n in mine if n in tensors]
        if not found:
            return False
        if part == "dsa_lite" and int(meta.get("dsa_lite.index_rope", 0)) != self.index_rope:
            raise SystemExit(f"{path}: its indexer rotates {meta.get('dsa_lite.index_rope', 0)} features, this run "
                             f"{self.index_rope} (--index-rope)")
        if len(found) != len(mine):
            raise SystemExit(f"{path}: {len(found)} of the {len(mine)} {part} tensors this geometry needs")
        with torch.no_grad():
            for n, p in mine.items():
                if tensors[n].shape != p.shape:
                    raise SystemExit(f"{path}: {n} is {list(tensors[n].shape)}, this geometry needs {list(p.shape)}")
                p.copy_(tensors[n].to(p.dtype))
        return True

    def metadata(self):
        meta = {"format": "pt"}
        if self.kv_down is not None:
            meta["mla_lite.rope_freqs"] = ",".join(str(f) for f in self.freqs)
        if self.index_q is not None:
            meta.update({"dsa_lite.top_k": self.top_k, "dsa_lite.sink_tokens": self.sink,
                         "dsa_lite.local_window": self.window})
            if self.index_rope:
                meta["dsa_lite.index_rope"] = self.index_rope
        return meta


def index_scores(retro, layer, x):
    """I [B, T, T] (unmasked) from the layer's normed input x [B, T, hidden]."""
    b, t, _ = x.shape
    q = (x @ retro.index_q[layer].t().to(x.dtype)).view(b, t, retro.index_heads, retro.index_dim).float()
    k = (x @ retro.index_k[layer].t().to(x.dtype)).float()
    w = x @ retro.index_w[layer].t().to(x.dtype)
    if retro.index_rope:
        n = retro.index_rope
        inv = 1.0 / (retro.index_theta ** (torch.arange(0, n, 2, dtype=torch.float32, device=x.device) / n))
        ang = torch.arange(t, dtype=torch.float32, device=x.device)[:, None] * inv[None, :]
        cos, sin = ang.cos(), ang.sin()
        q = rotate(q, cos, sin, n)
        k = rotate(k[:, :, None], cos, sin, n)[:, :, 0]
    dots = torch.relu(torch.einsum("bthd,bsd->bhts", q, k))
    return torch.einsum("bhts,bth->bts", dots, w.float())


def select_mask(scores, top_k, sink, window):
    """[B, T, T] bool: the positions each query keeps (the rule of IndexerTopkParams in src/backend/ops.h)."""
    t = scores.shape[-1]
    pos = torch.arange(t, device=scores.device)
    causal = pos[None, :] <= pos[:, None]
    forced = causal & ((pos[None, :] < sink) | (pos[None, :] > pos[:, None] - window))
    free = causal & ~forced
    ranked = scores.masked_fill(~free, float("-inf"))
    order = torch.sort(ranked, dim=-1, descending=True, stable=True).indices
    rank = torch.empty_like(order)
    rank.scatter_(-1, order, pos.expand_as(order).contiguous())
    room = (top_k - forced.sum(-1)).clamp(min=0)  # [T]
    chosen = free & (rank < room[None, :, None])
    short = (pos + 1 <= top_k)[None, :, None]
    return torch.where(short, causal, forced | chosen)


class Model(nn.Module):
    """The frozen backbone; forward() runs it with or without the retrofit's parts."""

    def __init__(self, folder, device, dtype=torch.float32):
        super().__init__()
        self.cfg = cfg = Config(folder)
        raw = st_io.read_folder(folder)
        self.w = {k: v.to(device=device, dtype=dtype) for k, v in raw.items()}
        self.device, self.dtype = device, dtype
        self.inv_freq = inverse_frequencies(cfg).to(device)

    def cos_sin(self, t):
        ang = torch.arange(t, device=self.device, dtype=torch.float32)[:, None] * self.inv_freq[None, :]
        return ang.cos().to(self.dtype), ang.sin().to(self.dtype)

    def attention(self, i, x, cos, sin, retro, mla, dsa, probe):
        cfg, w, p = self.cfg, self.w, f"model.layers.{i}.self_attn."
        b, t, _ = x.shape
        h, g, d = cfg.heads, cfg.kv_heads, cfg.head_dim
        q_plain = x @ w[p + "q_proj.weight"].t()
        k_plain = (x @ w[p + "k_proj.weight"].t()).view(b, t, g, d)
        if mla:
            rope, nope = rope_split(cfg, retro.freqs)
            if retro.q_down is not None:
                q_plain = q_plain + (x @ retro.q_down[i].t().to(x.dtype)) @ retro.q_up[i].t().to(x.dtype)
            if retro.k_rope is not None:
                k_plain = k_plain.clone()
                kr = (x @ retro.k_rope[i].t().to(x.dtype)).view(b, t, retro.rope_keys, len(rope))
                k_plain[..., rope] = kr.expand(b, t, g, len(rope)).to(k_plain.dtype)
        q_plain = q_plain.view(b, t, h, d)
        q = rotate(q_plain, cos, sin, cfg.rotary_dim)
        k = rotate(k_plain, cos, sin, cfg.rotary_dim)
        if mla:
            # RoPE stays on the kept frequencies only; the rest of K (and all of V) comes from the latent.
            c = x @ retro.kv_down[i].t().to(x.dtype)
            k_lite = torch.zeros_like(k)
            k_lite[..., rope] = k[..., rope]
            # .to(): under autocast the product is bf16 while rotate() may give the model's dtype.
            k_lite[..., nope] = (c @ retro.k_up[i].t().to(x.dtype)).view(b, t, g, len(nope)).to(k_lite.dtype)
            k = k_lite
            q = q.clone()
            q[..., nope] = q_plain[..., nope].to(q.dtype)
            v = (c @ retro.v_up[i].t().to(x.dtype)).view(b, t, g, d)
        else:
            v = (x @ w[p + "v_proj.weight"].t()).view(b, t, g, d)
        k = k.repeat_interleave(h // g, dim=2)
        v = v.repeat_interleave(h // g, dim=2)
        logits = torch.einsum("bthd,bshd->bhts", q.float(), k.float()) / math.sqrt(d)
        mask = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()[None]
        has_indexer = retro is not None and retro.index_q is not None
        scores = index_scores(retro, i, x.detach()) if has_indexer and (dsa or probe is not None) else None
        if dsa:
            if retro.oracle:
                scores = torch.softmax(logits.masked_fill(~mask[:, None], float("-inf")), dim=-1).sum(1)
            mask = select_mask(scores.detach(), retro.top_k, retro.sink, retro.window)
        probs = torch.softmax(logits.masked_fill(~mask[:, None], float("-inf")), dim=-1)
        if probe is not None:
            probe.append({"scores": scores, "mask": mask, "probs": probs.detach().sum(1)})
        out = torch.einsum("bhts,bshd->bthd", probs.to(v.dtype), v).reshape(b, t, h * d)
        return out @ w[p + "o_proj.weight"].t()

    def forward(self, ids, retro=None, mla=False, dsa=False, probe=None, inputs=None):
        """logits [B, T, V] and the final normed hidden states. probe: a list that gets per layer a dict of
        the indexer scores (None without an indexer), the attention mask and the head-summed probabilities.
        inputs: a list that gets each layer's normed attention input (calibration)."""
        cfg, w = self.cfg, self.w
        x = w["model.embed_tokens.weight"][ids]
        cos, sin = self.cos_sin(ids.shape[1])
        for i in range(cfg.layers):
            p = f"model.layers.{i}."
            normed = rms_norm(x, w[p + "input_layernorm.weight"], cfg.eps)
            if inputs is not None:
                inputs.append(normed.detach())
            x = x + self.attention(i, normed, cos, sin, retro, mla, dsa, probe)
            normed = rms_norm(x, w[p + "post_attention_layernorm.weight"], cfg.eps)
            gate = normed @ w[p + "mlp.gate_proj.weight"].t()
            up = normed @ w[p + "mlp.up_proj.weight"].t()
            x = x + (F.silu(gate) * up) @ w[p + "mlp.down_proj.weight"].t()
        hidden = rms_norm(x, w["model.norm.weight"], cfg.eps)
        head = w["model.embed_tokens.weight"] if cfg.tied else w["lm_head.weight"]
        return hidden @ head.t(), hidden
