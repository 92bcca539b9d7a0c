#!/usr/bin/env python3
"""The committed cross-check of tool and engine: an MLA-lite + DSA-lite retrofit of the tiny llama fixture,
initialised by init.py from random calibration tokens (not identity: a PCA latent that drops RoPE from all
but two frequencies, an indexer that prunes; a rank-3 query adapter and kept K rows moved off k_proj's, as
training would leave them), and the logits this tool's forward gives for one prompt; then an MLA-lite alone
with one shared RoPE key; then a DSA-lite alone whose indexer rotates by position.
tests/models/retrofit_test.cc loads each and checks the engine's logits against these.

    /usr/bin/python3 tools/retrofit/make_fixture.py   # writes tests/fixtures/retrofit/llama_retrofit*.safetensors
"""
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import init  # noqa: E402
import st_io  # noqa: E402
from llama_ref import Model, Retrofit  # noqa: E402

REPO = os.path.abspath(os.path.join(HERE, "..", ".."))


def main():
    torch.manual_seed(0)
    model = Model(os.path.join(REPO, "tests/fixtures/models/llama"), "cpu")
    calibration = torch.randint(3, model.cfg.vocab, (4, 64))
    inputs = init.layer_inputs(model, calibration)
    retro = Retrofit(model.cfg, rank=16, freqs=init.choose_freqs(model, inputs, 2), index_heads=2, index_dim=8,
                     top_k=8, sink=1, window=3, q_rank=3, k_rope=True)
    init.init_mla_lite(model, retro, inputs)
    as_trained(retro)
    init.init_indexer(model, retro, inputs)
    ids = torch.randint(3, model.cfg.vocab, (1, 24))
    with torch.no_grad():
        logits, _ = model.forward(ids, retro, mla=True, dsa=True)
    out = os.path.join(REPO, "tests/fixtures/retrofit")
    os.makedirs(out, exist_ok=True)
    write(out, "llama_retrofit", retro, ids, logits)

    # MLA-lite alone with one shared RoPE key (3 frequencies) and a rank-2 adapter.
    shared = Retrofit(model.cfg, rank=12, freqs=init.choose_freqs(model, inputs, 3), q_rank=2, k_rope=True,
                      shared_rope=True)
    init.init_mla_lite(model, shared, inputs)
    as_trained(shared)
    with torch.no_grad():
        logits, _ = model.forward(ids, shared, mla=True)
    write(out, "llama_retrofit_shared_rope", shared, ids, logits)

    # DSA-lite alone whose indexer rotates 4 of its 8 features by position (k 8 of the 24 positions).
    rotated = Retrofit(model.cfg, index_heads=2, index_dim=8, top_k=8, sink=1, window=3, index_rope=4)
    init.init_indexer(model, rotated, inputs)
    with torch.no_grad():
        logits, _ = model.forward(ids, rotated, dsa=True)
    write(out, "llama_retrofit_index_rope", rotated, ids, logits)


def as_trained(retro):
    """The query adapter and kept K rows moved off their starting point (no change, k_proj's), as training would."""
    with torch.no_grad():
        for up, k_rope in zip(retro.q_up, retro.k_rope):
            up.copy_(0.05 * torch.randn_like(up))
            k_rope.mul_(1.0 + 0.2 * torch.randn_like(k_rope))


def write(out, name, retro, ids, logits):
    st_io.write(os.path.join(out, f"{name}.safetensors"), retro.tensors(), retro.metadata())
    st_io.write(os.path.join(out, f"{name}_golden.safetensors"),
                {"ids": ids[0].to(torch.int32), "logits": logits[0].float()})
    print(f"{name}: freqs {retro.freqs}; logits {tuple(logits.shape)} written to {out}")


if __name__ == "__main__":
    main()
