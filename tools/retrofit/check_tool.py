#!/usr/bin/env python3
"""CPU self-check of the retrofit math (no corpus, no tokenizer; seconds on the 15M model):
- a full-rank MLA-lite init with every RoPE frequency kept gives the original logits (also with a query
  adapter and its own kept K rows, which start as no change);
- DSA-lite with top_k >= the context gives the original logits;
- select_mask keeps exactly what a brute-force loop over the rule keeps;
then writes an untrained MLA-lite (d_c 48, 4 frequencies) + DSA-lite file for `drift perplexity --retrofit`.

    python3 tools/retrofit/check_tool.py --model models/default --out /tmp/retrofit_check.safetensors
"""
import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import init  # noqa: E402
import st_io  # noqa: E402
from llama_ref import Model, Retrofit, select_mask  # noqa: E402


def brute_force_mask(scores, top_k, sink, window):
    t = scores.shape[-1]
    out = torch.zeros(t, t, dtype=torch.bool)
    for q in range(t):
        if q + 1 <= top_k:
            out[q, :q + 1] = True
            continue
        kept = [s for s in range(q + 1) if s < sink or s > q - window]
        rest = sorted((s for s in range(q + 1) if s not in kept), key=lambda s: (-scores[q, s].item(), s))
        for s in kept + rest[:max(0, top_k - len(kept))]:
            out[q, s] = True
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="models/default")
    ap.add_argument("--out", default="/tmp/retrofit_check.safetensors")
    args = ap.parse_args()
    torch.manual_seed(0)
    model = Model(args.model, "cpu")
    cfg = model.cfg
    ids = torch.randint(0, cfg.vocab, (2, 48))
    ids[:, 0] = 0
    inputs = init.layer_inputs(model, ids)
    base, _ = model.forward(ids)
    scale = base.abs().max().item()

    half = cfg.rotary_dim // 2
    full_rank = cfg.kv_heads * (2 * cfg.head_dim - 2 * half)
    for q_rank, k_rope in [(0, False), (8, True)]:
        exact = Retrofit(cfg, rank=full_rank, freqs=range(half), q_rank=q_rank, k_rope=k_rope)
        init.init_mla_lite(model, exact, inputs)
        err = (model.forward(ids, exact, mla=True)[0] - base).abs().max().item() / scale
        print(f"full-rank MLA-lite (query adapter rank {q_rank}, own kept K rows {k_rope}): "
              f"max |logit error| / max |logit| = {err:.2e}")
        assert err < 1e-4

    dense = Retrofit(cfg, index_heads=2, index_dim=16, top_k=48, sink=1, window=4)
    init.init_indexer(model, dense, inputs)
    err = (model.forward(ids, dense, dsa=True)[0] - base).abs().max().item() / scale
    print(f"DSA-lite with top_k = context: {err:.2e}")
    assert err < 1e-6

    scores = torch.randn(1, 40, 40)
    scores[0, :, 7] = scores[0, :, 9]  # ties
    for k, sink, window in [(8, 1, 4), (12, 4, 3), (40, 2, 2)]:
        assert torch.equal(select_mask(scores, k, sink, window)[0], brute_force_mask(scores[0], k, sink, window)), k
    print("select_mask = brute force")

    cut = Retrofit(cfg, rank=48, freqs=init.choose_freqs(model, inputs, 4), index_heads=4, index_dim=32, top_k=64,
                   sink=4, window=16)
    init.init_mla_lite(model, cut, inputs)
    init.init_indexer(model, cut, inputs)
    err = (model.forward(ids, cut, mla=True)[0] - base).abs().max().item() / scale
    print(f"untrained d_c 48, freqs {cut.freqs}: max logit error {err:.2e}")
    st_io.write(args.out, cut.tensors(), cut.metadata())
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
