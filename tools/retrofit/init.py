"""Initial retrofit weights from the backbone and a calibration batch, before any training.

- Kept RoPE frequencies (MHA2MLA's 2-norm rule): a frequency's weight in q.k is bounded by |q_f| |k_f|, the
  norms of its feature pair; summed over heads and layers (each layer normalised), the best n_freqs win.
  One set for the whole model: the engine builds one RoPE table for it.
- MLA-lite (TransMLA's balanced joint PCA): per layer the outputs [alpha * K_nope | V] over the calibration
  tokens, alpha matching K's scale to V's; their top-d_c principal directions U give kv_down = U^T [alpha
  W_k_nope; W_v], k_up = U_K / alpha, v_up = U_V. At d_c = the full width this is the layer exactly.
  k_rope (a retrofit with its own kept K rows) starts as k_proj's kept rows (a shared key as their mean over
  the KV heads); a query adapter as no change.
- DSA-lite's indexer: its key is the top-d_idx principal directions P of the layer's K outputs, index_k =
  P^T W_k; head j copies query head j * H / H_I projected the same way, index_q_j = P_g^T W_q,h; index_w
  points along the mean hidden state so that w_j(x) is about 1 / (H_I sqrt(head_dim)) for a typical x.
"""
import math

import torch

from llama_ref import rope_split


def layer_inputs(model, ids):
    """Each layer's normed attention input over a calibration batch, flattened: [layers][N, hidden] fp32."""
    inputs = []
    with torch.no_grad():
        model.forward(ids, inputs=inputs)
    return [x.reshape(-1, x.shape[-1]).float() for x in inputs]


def choose_freqs(model, inputs, n_freqs):
    cfg, half = model.cfg, model.cfg.rotary_dim // 2
    total = torch.zeros(half, device=inputs[0].device)
    for i, x in enumerate(inputs):
        p = f"model.layers.{i}.self_attn."
        q = (x @ model.w[p + "q_proj.weight"].float().t()).view(-1, cfg.heads, cfg.head_dim)
        k = (x @ model.w[p + "k_proj.weight"].float().t()).view(-1, cfg.kv_heads, cfg.head_dim)
        qn = (q[..., :half].pow(2) + q[..., half:2 * half].pow(2)).sqrt().mean(0)  # [H, half]
        kn = (k[..., :half].pow(2) + k[..., half:2 * half].pow(2)).sqrt().mean(0)  # [G, half]
        score = (qn * kn.repeat_interleave(cfg.heads // cfg.kv_heads, dim=0)).sum(0)
        total += score / score.sum()
    return sorted(torch.topk(total, n_freqs).indices.tolist())


def top_directions(y, n):
    """The top-n principal directions (uncentred) of the rows of y [N, R]: [R, n]."""
    cov = y.t() @ y
    _, vecs = torch.linalg.eigh(cov.double())
    return vecs[:, -n:].flip(-1).float()


def init_mla_lite(model, retro, inputs):
    cfg = model.cfg
    g, d = cfg.kv_heads, cfg.head_dim
    _, nope = rope_split(cfg, retro.freqs)
    rows = torch.tensor([h * d + r for h in range(g) for r in nope], dtype=torch.long, device=inputs[0].device)
    for i, x in enumerate(inputs):
        p = f"model.layers.{i}.self_attn."
        wk = model.w[p + "k_proj.weight"].float()[rows]
        wv = model.w[p + "v_proj.weight"].float()
        k_out, v_out = x @ wk.t(), x @ wv.t()
        alpha = math.sqrt(v_out.pow(2).mean().item() / max(k_out.pow(2).mean().item(), 1e-12))
        u = top_directions(torch.cat([alpha * k_out, v_out], dim=1), retro.rank)
        with torch.no_grad():
            retro.kv_down[i].copy_(u.t() @ torch.cat([alpha * wk, wv], dim=0))
            retro.k_up[i].copy_(u[:len(rows)] / alpha)
            retro.v_up[i].copy_(u[len(rows):])
            if retro.k_rope is not None:
                rope, _ = rope_split(cfg, retro.freqs)
                kept = model.w[p + "k_proj.weight"].float()[[h * d + r for h in range(g) for r in rope]]
                if retro.rope_keys == 1 and g > 1:  # a shared key starts as the heads' mean
                    kept = kept.view(g, len(rope), -1).mean(0)
                retro.k_rope[i].copy_(kept)


def init_indexer(model, retro, inputs):
    cfg = model.cfg
    g, d, h = cfg.kv_heads, cfg.head_dim, cfg.heads
    for i, x in enumerate(inputs):
        p = f"model.layers.{i}.self_attn."
        wk = model.w[p + "k_proj.weight"].float()
        wq = model.w[p + "q_proj.weight"].float()
        proj = top_directions(x @ wk.t(), retro.index_dim)  # [G * D, d_idx]
        mean = x.mean(0)
        with torch.no_grad():
            retro.index_k[i].copy_(proj.t() @ wk)
            for j in range(retro.index_heads):
                head = j * h // retro.index_heads
                group = head // (h // g)
                block = proj[group * d:(group + 1) * d]  # [D, d_idx]
                retro.index_q[i][j * retro.index_dim:(j + 1) * retro.index_dim].copy_(block.t() @ wq[head * d:(head + 1) * d])
            scale = 1.0 / (retro.index_heads * math.sqrt(d))
            retro.index_w[i].copy_((mean / mean.pow(2).sum() * scale).expand(retro.index_heads, -1))
