"""EAGLE-3 draft head: the PyTorch reference of the checkpoint layout and the arithmetic the engine implements
(src/model/arch/eagle3.h; ../shared/research/algorithms.md §1).

Layout (a folder): config.json (LlamaForCausalLMEagle3, Llama keys, num_hidden_layers 1, vocab_size = the
TARGET vocabulary V, draft_vocab_size Vd, target_hidden_size Ht, eagle_config.eagle_aux_hidden_state_layer_ids
in OUTPUT-of-layer ids) + model.safetensors (bf16 weights, d2t int64 [Vd], t2d bool [V]):

    fc.weight                                   [H, 3Ht]
    midlayer.self_attn.{q,k,v}_proj.weight      [heads*hd | kv*hd | kv*hd, 2H]
    midlayer.self_attn.o_proj.weight            [H, heads*hd]
    midlayer.mlp.{gate,up}_proj.weight          [I, H];  midlayer.mlp.down_proj.weight [H, I]
    midlayer.{hidden_norm,input_layernorm,post_attention_layernorm}.weight, norm.weight   [H]
    lm_head.weight                              [Vd, H]
    d2t [Vd] int64 (target id of draft id i = i + d2t[i]);  t2d [V] bool

No embed_tokens: the target's (frozen) token embedding is used, so H must equal the target's hidden size.

One row (token t, input hidden h [H], position p):
    x       = cat(input_layernorm(embed(t)), hidden_norm(h))            [2H], the embedding first
    h1      = h + o_proj(attention(x))                                  Llama GQA, rotate-half RoPE at p
    prenorm = h1 + down(silu(gate(n)) * up(n)),  n = post_attention_layernorm(h1)
    logits  = lm_head(norm(prenorm))                                    [Vd]
Fused target feature of position i: g_i = fc(cat(s_low[i], s_mid[i], s_high[i])), s_c = the target's residual
stream ENTERING layer c (capture_layers, input-of-layer ids; the checkpoint stores c - 1).

Rows and positions (must match the engine): real row i has token t_{i+1}, hidden g_i, position i, causal.
Drafting after a context whose last real row is b-1: depth-1 nodes are the top-k of row b-1's logits; a node
at depth d >= 1 is fed as a row with its own token, hidden = its parent's prenorm (row b-1's for d = 1),
position b-1+d, attending to real rows 0..b-1, its ancestors and itself.

Training-time test (ttt_forward): step 0 is the real rows; step s >= 1 row i takes token t_{i+1+s} (ground
truth) or its own previous draft (free_running), hidden = step s-1's prenorm at row i, position i+s, and attends
to step-0 keys of rows <= i plus the keys of steps 1..s of row i: exactly the depth-s node of a chain drafted
after a context ending at row i. So one batched call gives every start position's chain at once.
"""
import json
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

ARCHITECTURE = "LlamaForCausalLMEagle3"
TTT_STEPS = 7
TTT_DECAY = 0.8
NEG_INF = float("-inf")


def default_capture_layers(num_layers):
    """EAGLE's choice, input-of-layer ids: (2, L//2, L-3)."""
    return (2, num_layers // 2, num_layers - 3)


def head_config(*, hidden_size, intermediate_size, num_attention_heads, num_key_value_heads, head_dim,
                vocab_size, draft_vocab_size, target_hidden_size, capture_layers, rms_norm_eps=1e-5,
                rope_theta=10000.0, max_position_embeddings=2048):
    """config.json of a head. capture_layers are input-of-layer ids; written as output-of-layer ids (c - 1)."""
    if len(capture_layers) != 3:
        raise ValueError(f"capture_layers must be 3 layer ids (low, mid, high), got {capture_layers}")
    return {
        "architectures": [ARCHITECTURE],
        "model_type": "llama",
        "hidden_size": int(hidden_size),
        "intermediate_size": int(intermediate_size),
        "num_attention_heads": int(num_attention_heads),
        "num_key_value_heads": int(num_key_value_heads),
        "head_dim": int(head_dim),
        "num_hidden_layers": 1,
        "hidden_act": "silu",
        "attention_bias": False,
        "mlp_bias": False,
        "rms_norm_eps": float(rms_norm_eps),
        "rope_theta": float(rope_theta),
        "rope_parameters": {"rope_theta": float(rope_theta), "rope_type": "default"},
        "max_position_embeddings": int(max_position_embeddings),
        "vocab_size": int(vocab_size),
        "draft_vocab_size": int(draft_vocab_size),
        "target_hidden_size": int(target_hidden_size),
        "tie_word_embeddings": False,
        "dtype": "bfloat16",
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": [int(c) - 1 for c in capture_layers],
                         "use_aux_hidden_state": True},
    }


def capture_layers_of(cfg):
    """Input-of-layer capture ids of a head config (the checkpoint stores output-of-layer ids)."""
    return [int(i) + 1 for i in cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"]]


def rope_theta_of(cfg):
    rp = cfg.get("rope_parameters") or {}
    if rp.get("rope_type", "default") != "default" or cfg.get("rope_scaling"):
        raise ValueError(f"only default RoPE is implemented: {rp or cfg.get('rope_scaling')}")
    return float(rp.get("rope_theta", cfg.get("rope_theta", 10000.0)))


# ---------------------------------------------------------------------------------------------------------
# pieces

class RMSNorm(nn.Module):
    """As transformers' LlamaRMSNorm: normalise in fp32, cast back, then scale."""

    def __init__(self, dim, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        dtype = x.dtype
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x32.to(dtype)


def rope_cos_sin(positions, head_dim, theta):
    """positions [...] int -> cos, sin [..., head_dim] fp32 (Llama default RoPE, rotate-half layout)."""
    inv = 1.0 / (theta ** (torch.arange(0, head_dim, 2, device=positions.device, dtype=torch.int64).float()
                           / head_dim))                       # [hd/2]
    freqs = positions.float()[..., None] * inv                # [..., hd/2]
    emb = torch.cat([freqs, freqs], dim=-1)                   # [..., hd]
    return emb.cos(), emb.sin()


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat([-x2, x1], dim=-1)


def apply_rope(x, cos, sin):
    """x [..., hd]; cos/sin broadcastable to x."""
    return x * cos.to(x.dtype) + rotate_half(x) * sin.to(x.dtype)


def causal_mask(n, device):
    """Additive [n, n]: 0 where key j <= query i, -inf above the diagonal."""
    return torch.full((n, n), NEG_INF, device=device).triu(1)


def attend(q, k0, v0, mask0, pk=None, pv=None):
    """Attention over shared keys plus keys private to each row, as one softmax.

    q       [B, nh, R, hd]      queries of R rows (RoPE applied)
    k0, v0  [B, nkv, S, hd]     shared keys/values (e.g. the real rows, or a KV cache + these rows)
    mask0   additive, broadcastable to [B, nh, R, S] (0 or -inf)
    pk, pv  [B, R, A, nkv, hd]  optional: A more keys that only row r sees (its ancestors and itself)
    ->      [B, nh, R, hd]      in q's dtype
    This equals attention over the concatenated keys [k0 | every row's private keys] with an additive mask that
    is -inf outside each row's own private block; only the visible block is computed.
    """
    nh, nkv, hd = q.shape[1], k0.shape[1], q.shape[-1]
    rep = nh // nkv
    ct = torch.float64 if q.dtype == torch.float64 else torch.float32  # softmax in fp32 (fp64 in tests)
    qf = q.to(ct) * (hd ** -0.5)
    k0r = k0.repeat_interleave(rep, dim=1).to(ct)                   # [B, nh, S, hd] (query head h: kv head h//rep)
    v0r = v0.repeat_interleave(rep, dim=1).to(ct)
    scores = torch.matmul(qf, k0r.transpose(-1, -2)).to(ct) + mask0.to(ct)  # [B, nh, R, S] (autocast: bf16 matmul)
    S = scores.shape[-1]
    if pk is not None:
        pkr = pk.repeat_interleave(rep, dim=3).to(ct)              # [B, R, A, nh, hd]
        sp = torch.einsum("bhrd,brahd->bhra", qf, pkr).to(ct)      # [B, nh, R, A]
        scores = torch.cat([scores, sp], dim=-1)                    # [B, nh, R, S + A]
    p = scores.softmax(dim=-1)
    out = torch.matmul(p[..., :S], v0r).to(ct)                      # [B, nh, R, hd]
    if pk is not None:
        pvr = pv.repeat_interleave(rep, dim=3).to(ct)              # [B, R, A, nh, hd]
        out = out + torch.einsum("bhra,brahd->bhrd", p[..., S:], pvr).to(ct)
    return out.to(q.dtype)


# ---------------------------------------------------------------------------------------------------------
# the head

class Eagle3Head(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = dict(cfg)
        H, Ht, I = cfg["hidden_size"], cfg["target_hidden_size"], cfg["intermediate_size"]
        self.nh, self.nkv, self.hd = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
        if self.nh % self.nkv:
            raise ValueError(f"num_attention_heads {self.nh} is not a multiple of num_key_value_heads {self.nkv}")
        if self.hd % 2:
            raise ValueError("head_dim must be even for RoPE")
        self.H, self.Ht, self.V, self.Vd = H, Ht, cfg["vocab_size"], cfg["draft_vocab_size"]
        self.theta = rope_theta_of(cfg)
        self.capture_layers = capture_layers_of(cfg)
        eps = cfg["rms_norm_eps"]
        self.fc = nn.Linear(3 * Ht, H, bias=False)
        self.midlayer = nn.Module()
        self.midlayer.hidden_norm = RMSNorm(H, eps)
        self.midlayer.input_layernorm = RMSNorm(H, eps)
        self.midlayer.post_attention_layernorm = RMSNorm(H, eps)
        attn = self.midlayer.self_attn = nn.Module()
        attn.q_proj = nn.Linear(2 * H, self.nh * self.hd, bias=False)
        attn.k_proj = nn.Linear(2 * H, self.nkv * self.hd, bias=False)
        attn.v_proj = nn.Linear(2 * H, self.nkv * self.hd, bias=False)
        attn.o_proj = nn.Linear(self.nh * self.hd, H, bias=False)
        mlp = self.midlayer.mlp = nn.Module()
        mlp.gate_proj = nn.Linear(H, I, bias=False)
        mlp.up_proj = nn.Linear(H, I, bias=False)
        mlp.down_proj = nn.Linear(I, H, bias=False)
        self.norm = RMSNorm(H, eps)
        self.lm_head = nn.Linear(H, self.Vd, bias=False)
        self.register_buffer("d2t", torch.zeros(self.Vd, dtype=torch.int64))
        self.register_buffer("t2d", torch.zeros(self.V, dtype=torch.bool))
        self.register_buffer("embed", torch.zeros(0), persistent=False)  # the target's, set_embedding()

    # --- setup
    def set_embedding(self, weight):
        """The target's token embedding [V, H] (frozen, not saved)."""
        if tuple(weight.shape) != (self.V, self.H):
            raise ValueError(f"target embedding {tuple(weight.shape)} does not fit the head: needs [V={self.V}, H={self.H}]")
        self.embed = weight.detach().to(self.fc.weight.device, torch.float32)

    def set_vocab(self, used_ids):
        """used_ids: sorted target ids of the draft vocabulary [Vd] -> d2t, t2d."""
        used = torch.as_tensor(used_ids, dtype=torch.int64, device=self.d2t.device)
        if used.numel() != self.Vd or bool((used[1:] <= used[:-1]).any()):
            raise ValueError("draft vocabulary must be Vd strictly increasing target ids")
        self.d2t.copy_(used - torch.arange(self.Vd, device=used.device))
        self.t2d.zero_()
        self.t2d[used] = True

    def draft_to_target(self, draft_ids):
        return draft_ids + self.d2t[draft_ids]

    def target_to_draft_table(self):
        """[V] int64: draft id of each target id, -1 outside the draft vocabulary."""
        table = torch.full((self.V,), -1, dtype=torch.int64, device=self.d2t.device)
        ids = torch.arange(self.Vd, device=self.d2t.device)
        table[ids + self.d2t] = ids
        return table

    def num_parameters(self):
        return sum(p.numel() for p in self.parameters())

    # --- one decoder layer, split where the attention goes
    def fuse(self, features):
        """[..., 3Ht] (low | mid | high) -> [..., H]"""
        return self.fc(features)

    def project_qkv(self, tokens, hidden, positions):
        """tokens [B, R] target ids, hidden [B, R, H], positions [B, R] -> q [B,nh,R,hd], k, v [B,nkv,R,hd]"""
        B, R = tokens.shape
        a = self.midlayer.self_attn
        e = F.embedding(tokens, self.embed)                                         # [B, R, H]
        x = torch.cat([self.midlayer.input_layernorm(e), self.midlayer.hidden_norm(hidden)], dim=-1)  # [B,R,2H]
        q = a.q_proj(x).view(B, R, self.nh, self.hd).transpose(1, 2)
        k = a.k_proj(x).view(B, R, self.nkv, self.hd).transpose(1, 2)
        v = a.v_proj(x).view(B, R, self.nkv, self.hd).transpose(1, 2)
        cos, sin = rope_cos_sin(positions, self.hd, self.theta)                     # [B, R, hd]
        cos, sin = cos[:, None], sin[:, None]                                       # [B, 1, R, hd]
        return apply_rope(q, cos, sin), apply_rope(k, cos, sin), v

    def finish(self, hidden, attn_out):
        """hidden [B, R, H] (the row's input hidden: the residual), attn_out [B, nh, R, hd] -> prenorm [B, R, H]"""
        B, _, R, _ = attn_out.shape
        h1 = hidden + self.midlayer.self_attn.o_proj(attn_out.transpose(1, 2).reshape(B, R, self.nh * self.hd))
        m = self.midlayer.mlp
        n = self.midlayer.post_attention_layernorm(h1)
        return h1 + m.down_proj(F.silu(m.gate_proj(n)) * m.up_proj(n))

    def logits(self, prenorm):
        """[..., H] -> [..., Vd]"""
        return self.lm_head(self.norm(prenorm))

    # --- inference-style forward: rows over an optional KV cache
    def forward(self, tokens, hidden, positions, mask, past=None, private=None):
        """tokens [B, R], hidden [B, R, H], positions [B, R];
        past: (k, v) [B, nkv, P, hd] of earlier rows or None; mask: additive over [past rows | these rows],
        broadcastable to [B, nh, R, P + R]; private: optional (pk, pv) [B, R, A, nkv, hd] seen only by each row.
        -> logits [B, R, Vd], prenorm [B, R, H], (k, v) of these rows [B, nkv, R, hd]."""
        q, k, v = self.project_qkv(tokens, hidden, positions)
        K = k if past is None else torch.cat([past[0], k], dim=2)
        Vv = v if past is None else torch.cat([past[1], v], dim=2)
        pk, pv = private if private is not None else (None, None)
        prenorm = self.finish(hidden, attend(q, K, Vv, mask, pk, pv))
        return self.logits(prenorm), prenorm, (k, v)

    # --- training-time test
    def ttt_forward(self, seq, fused, steps=TTT_STEPS, free_running=False):
        """seq [B, N] target ids with N >= T + steps (pad past each sequence's end), fused [B, T, H] = g_0..g_{T-1}.
        Step s, row i: token seq[i+1+s] (step 0 always; steps >= 1 unless free_running, which feeds the row's
        own previous draft mapped through d2t), hidden = step s-1's prenorm of row i (fused for s = 0),
        position i+s; sees step-0 keys of rows <= i and row i's keys of steps 1..s.
        -> list of `steps` logits [B, T, Vd]; logits[s][b, i] predicts the token at index i+2+s."""
        B, T, _ = fused.shape
        if seq.shape[1] < T + steps:
            raise ValueError(f"seq has {seq.shape[1]} tokens; {T} rows x {steps} steps need {T + steps}")
        positions = torch.arange(T, device=fused.device)[None].expand(B, T)           # [B, T]
        mask0 = causal_mask(T, fused.device)                                          # [T, T]
        hidden, k0, v0, pks, pvs, outs = fused, None, None, [], [], []
        for s in range(steps):
            if s == 0 or not free_running:
                toks = seq[:, 1 + s:1 + s + T]                                        # [B, T]
            else:
                toks = self.draft_to_target(outs[-1].argmax(-1))                     # [B, T]
            q, k, v = self.project_qkv(toks, hidden, positions + s)
            if s == 0:
                k0, v0 = k, v
                out = attend(q, k0, v0, mask0)
            else:
                pks.append(k.transpose(1, 2))                                         # [B, T, nkv, hd]
                pvs.append(v.transpose(1, 2))
                out = attend(q, k0, v0, mask0, torch.stack(pks, dim=2), torch.stack(pvs, dim=2))  # A = s
            hidden = self.finish(hidden, out)                                         # prenorm, not detached
            outs.append(self.logits(hidden))
        return outs


# ---------------------------------------------------------------------------------------------------------
# drafting, batched over every start position (greedy verification = comparison with the target's tokens)

@torch.no_grad()
def chain_accept(head, seq, fused, valid_len, depth=7):
    """Chain of top-1 drafts after every context. seq [B, N] (N >= T + depth, padded), fused [B, T, H],
    valid_len [B]: tokens 0..valid_len-1 of each row are the target's greedy sequence.
    The context ending at token index b (last real row b-1) gets drafts for tokens b+1..b+depth.
    -> accepted [B, T] int64: accepted[b_, i] = leading drafts of row i's chain equal to seq[i+2..]
       (index i = b-1; rows whose next token is past valid_len get 0)."""
    outs = head.ttt_forward(seq, fused, steps=depth, free_running=True)
    B, T = fused.shape[:2]
    idx = torch.arange(T, device=seq.device)[None]                                    # [1, T]
    acc = torch.zeros(B, T, dtype=torch.int64, device=seq.device)
    alive = torch.ones(B, T, dtype=torch.bool, device=seq.device)
    for s, lg in enumerate(outs):
        pos = idx + 2 + s                                                             # token index guessed
        truth = seq.gather(1, pos.clamp(max=seq.shape[1] - 1).expand(B, T))
        ok = (head.draft_to_target(lg.argmax(-1)) == truth) & (pos < valid_len[:, None])
        alive = alive & ok
        acc += alive.long()
    return acc


@torch.no_grad()
def tree_accept(head, seq, fused, valid_len, depth=6, top_k=8, total_tokens=48):
    """EAGLE-2 dynamic tree after every context, greedy acceptance against seq.
    depth = draft tokens on the longest path (EAGLE's `depth` argument counts expansion forwards: ours - 1);
    total_tokens includes the root (the last real token), so total_tokens - 1 drafted nodes are kept.
    Depth 1: the top_k of the last real row. Each later depth: the top_k frontier nodes are fed (token, parent's
    prenorm, position b-1+d, ancestors + self as private keys), each proposes top_k children scored by
    cumulative log-probability; all top_k^2 children join the pool; the best top_k become the next frontier.
    Kept: the total_tokens-1 best of the pool (a child never scores above its parent, so it is ancestor-closed).
    -> accepted [B, T] int64 (longest kept path matching the target's tokens)."""
    B, T = fused.shape[:2]
    dev, K = seq.device, top_k
    rows = torch.arange(T, device=dev)
    positions = rows[None].expand(B, T)
    mask0 = causal_mask(T, dev)
    q, k0, v0 = head.project_qkv(seq[:, 1:1 + T], fused, positions)
    prenorm0 = head.finish(fused, attend(q, k0, v0, mask0))                          # [B, T, H]
    lp = head.logits(prenorm0).float().log_softmax(-1)                               # [B, T, Vd]
    score, dtok = lp.topk(K, dim=-1)                                                 # [B, T, K]

    def truth_at(d):  # target token at index i+1+d for every row i, -1 past the valid end: [B, T, 1]
        pos = rows[None] + 1 + d
        t = seq.gather(1, pos.clamp(max=seq.shape[1] - 1).expand(B, T))
        return torch.where(pos < valid_len[:, None], t, torch.full_like(t, -1))[..., None]

    match = head.draft_to_target(dtok) == truth_at(1)                                # [B, T, K]
    pool_scores, pool_match = [score], [match]            # per depth [B, T, n_d], n_1 = K, later K*K
    f_tok, f_score, f_match = dtok, score, match           # frontier at depth 1
    f_hidden = prenorm0[:, :, None, :].expand(B, T, K, head.H)                       # parents' prenorm
    anc_k = anc_v = None                                   # [B, T, K, d-1, nkv, hd] keys of ancestors
    mask_rows = mask0.repeat_interleave(K, dim=0)                                    # [T*K, T]
    for d in range(2, depth + 1):
        # feed the depth-(d-1) frontier: R = T*K rows, row r = i*K + j
        toks = head.draft_to_target(f_tok).reshape(B, T * K)
        hid = f_hidden.reshape(B, T * K, head.H)
        pos = (positions[:, :, None] + (d - 1)).expand(B, T, K).reshape(B, T * K)    # b-1+(d-1) with b-1 = i
        qn, kn, vn = head.project_qkv(toks, hid, pos)                                # k/v [B, nkv, TK, hd]
        own_k = kn.transpose(1, 2).reshape(B, T, K, 1, head.nkv, head.hd)
        own_v = vn.transpose(1, 2).reshape(B, T, K, 1, head.nkv, head.hd)
        path_k = own_k if anc_k is None else torch.cat([anc_k, own_k], dim=3)        # [B, T, K, d-1, nkv, hd]
        path_v = own_v if anc_v is None else torch.cat([anc_v, own_v], dim=3)
        A = path_k.shape[3]
        out = attend(qn, k0, v0, mask_rows, path_k.reshape(B, T * K, A, head.nkv, head.hd),
                     path_v.reshape(B, T * K, A, head.nkv, head.hd))
        pre = head.finish(hid, out).reshape(B, T, K, head.H)
        clp = head.logits(pre).float().log_softmax(-1)                               # [B, T, K, Vd]
        cscore, ctok = clp.topk(K, dim=-1)                                           # [B, T, K, K]
        cscore = cscore + f_score[..., None]
        cmatch = f_match[..., None] & (head.draft_to_target(ctok) == truth_at(d)[..., None])
        pool_scores.append(cscore.reshape(B, T, K * K))
        pool_match.append(cmatch.reshape(B, T, K * K))
        f_score, sel = cscore.reshape(B, T, K * K).topk(K, dim=-1)                  # [B, T, K]
        parent = sel // K
        f_tok = ctok.reshape(B, T, K * K).gather(2, sel)
        f_match = cmatch.reshape(B, T, K * K).gather(2, sel)
        f_hidden = pre.gather(2, parent[..., None].expand(B, T, K, head.H))
        g = parent[..., None, None, None].expand(B, T, K, A, head.nkv, head.hd)
        anc_k, anc_v = path_k.gather(2, g), path_v.gather(2, g)
    allscores = torch.cat(pool_scores, dim=-1)                                       # [B, T, pool]
    keep = min(total_tokens - 1, allscores.shape[-1])
    thresh = allscores.topk(keep, dim=-1).values[..., -1:]                           # [B, T, 1]
    acc = torch.zeros(B, T, dtype=torch.int64, device=dev)
    for d, (sc, mt) in enumerate(zip(pool_scores, pool_match), start=1):
        hit = (mt & (sc >= thresh)).any(-1)
        acc = torch.where(hit, torch.full_like(acc, d), acc)
    return acc


def walk_rounds(acc_row, start, valid_len, depth):
    """Greedy speculative decoding along one sequence: a round with context ending at token index b accepts
    acc_row[b-1] drafts plus the target's bonus token. Starts at b = start (the prompt length: the prefill
    produced token `start`). Counts only rounds with room for a full path and its bonus (b + depth + 1 <=
    valid_len - 1). -> list of accepted-draft counts, one per round."""
    rounds, b = [], start
    while b + depth + 1 <= valid_len - 1:
        a = int(acc_row[b - 1])
        rounds.append(a)
        b += a + 1
    return rounds


# ---------------------------------------------------------------------------------------------------------
# draft vocabulary, save / load

def draft_vocab_from_counts(counts, vd, always=()):
    """counts [V] (tokens seen in the target's generations) -> sorted target ids of the vd most frequent
    (ties by lower id), with `always` forced in. Returns a Python list."""
    counts = torch.as_tensor(counts, dtype=torch.float64).clone()
    V = counts.numel()
    if vd > V:
        raise ValueError(f"draft vocabulary {vd} > target vocabulary {V}")
    for t in always:
        counts[t] = float("inf")
    # stable: sort by -count, then id
    order = sorted(range(V), key=lambda t: (-float(counts[t]), t))
    return sorted(order[:vd])


def save_head(head, folder, dtype=torch.bfloat16, extra_files=None):
    """config.json + model.safetensors (floating tensors in `dtype`, d2t int64, t2d bool)."""
    from safetensors.torch import save_file
    os.makedirs(folder, exist_ok=True)
    tensors = {}
    for name, t in head.state_dict().items():
        t = t.detach().to("cpu")
        tensors[name] = (t.to(dtype) if t.is_floating_point() else t).contiguous()
    if "embed" in tensors:
        raise RuntimeError("the target embedding must not be saved")
    save_file(tensors, os.path.join(folder, "model.safetensors"), metadata={"format": "pt"})
    cfg = dict(head.cfg)
    cfg["dtype"] = str(dtype).replace("torch.", "")
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    for name, obj in (extra_files or {}).items():
        with open(os.path.join(folder, name), "w") as f:
            json.dump(obj, f, indent=1, default=str)
    return sorted(tensors)


EXPECTED_TENSORS = [
    "d2t", "fc.weight", "lm_head.weight", "midlayer.hidden_norm.weight", "midlayer.input_layernorm.weight",
    "midlayer.mlp.down_proj.weight", "midlayer.mlp.gate_proj.weight", "midlayer.mlp.up_proj.weight",
    "midlayer.post_attention_layernorm.weight", "midlayer.self_attn.k_proj.weight",
    "midlayer.self_attn.o_proj.weight", "midlayer.self_attn.q_proj.weight", "midlayer.self_attn.v_proj.weight",
    "norm.weight", "t2d",
]


def load_head(folder, device="cpu", dtype=torch.float32):
    """A head from a folder written by save_head (weights in `dtype`; set_embedding() before use)."""
    from safetensors.torch import load_file
    with open(os.path.join(folder, "config.json")) as f:
        cfg = json.load(f)
    if cfg.get("architectures") != [ARCHITECTURE]:
        raise ValueError(f"{folder}: architectures {cfg.get('architectures')}, expected [{ARCHITECTURE}]")
    head = Eagle3Head(cfg)
    tensors = load_file(os.path.join(folder, "model.safetensors"))
    names = sorted(tensors)
    if names != EXPECTED_TENSORS:
        raise ValueError(f"{folder}: tensors {names} != {EXPECTED_TENSORS}")
    head.load_state_dict({k: v.float() if v.is_floating_point() else v for k, v in tensors.items()}, strict=True)
    return head.to(device=device, dtype=dtype)


def init_lm_head_from_target(head, target_lm_head, target_norm_weight=None):
    """Warm start: lm_head rows = the target's output rows of the draft vocabulary (and norm = its final norm)."""
    used = head.draft_to_target(torch.arange(head.Vd, device=head.d2t.device))
    with torch.no_grad():
        head.lm_head.weight.copy_(target_lm_head.to(head.lm_head.weight)[used])
        if target_norm_weight is not None:
            head.norm.weight.copy_(target_norm_weight.to(head.norm.weight))


def param_summary(head):
    total = head.num_parameters()
    return {"parameters": total, "bf16_bytes": total * 2,
            "shapes": {n: list(p.shape) for n, p in head.named_parameters()}}


def check_finite(t, what):
    if not bool(torch.isfinite(t).all()):
        raise FloatingPointError(f"{what}: not finite")
    return t


__all__ = ["Eagle3Head", "head_config", "save_head", "load_head", "attend", "causal_mask", "chain_accept",
           "tree_accept", "walk_rounds", "draft_vocab_from_counts", "default_capture_layers", "TTT_STEPS",
           "TTT_DECAY"]
