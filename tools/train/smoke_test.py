#!/usr/bin/env python3
"""End-to-end check of the training pipeline at toy size, to run before spending a real training run.

    python3 tools/train/smoke_test.py [--work /tmp/drift-smoke] [--corpus .corpus] [--compile]

On a slice of the corpus (about 3 MB; synthetic text from Python docstrings if there is no corpus) it runs
train.py for both architectures with the "tiny" preset for 20 steps: tokenizer training (vocab 8192), the
token cache, the training loop, the HF folder, the reload with AutoModelForCausalLM and the bits-per-byte
evaluation. Then it checks the written folders (files, config fields, tensor names, dtypes, tokenizer
structure), runs eval_bpb.py standalone and compares, checks the sliding-window scorer against the model's
own loss on a short text, and checks that --resume continues a run. Exit status 0 and "SMOKE OK" at the end
mean every check passed. Takes a minute or two on a GPU, a few minutes on a CPU.
"""
import argparse
import gzip
import json
import lzma
import math
import os
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)

FAILURES = []


def check(cond, what):
    print(("  ok    " if cond else "  FAIL  ") + what, flush=True)
    if not cond:
        FAILURES.append(what)
    return cond


def make_mini_corpus(corpus_dir, dst, train_bytes=3_000_000, valid_bytes=60_000):
    os.makedirs(dst, exist_ok=True)
    src = None
    for name in ("train.txt.xz", "train.txt.gz", "train.txt"):
        if os.path.exists(os.path.join(corpus_dir, name)):
            src = os.path.join(corpus_dir, name)
            break
    if src and os.path.exists(os.path.join(corpus_dir, "valid.txt")):
        opener = lzma.open if src.endswith(".xz") else gzip.open if src.endswith(".gz") else open
        with opener(src, "rb") as f:
            train = f.read(train_bytes).decode("utf-8", "ignore")
        with open(os.path.join(corpus_dir, "valid.txt"), "rb") as f:
            valid = f.read(valid_bytes).decode("utf-8", "ignore")
        train = train[:train.rfind("\n\n\n")] if "\n\n\n" in train else train
        valid = valid[:valid.rfind("\n\n\n")] if "\n\n\n" in valid else valid
        print(f"mini corpus from {src}: {len(train):,} + {len(valid):,} characters")
    else:
        import importlib
        import inspect
        docs = []
        for name in ["os", "json", "inspect", "argparse", "collections", "functools", "itertools", "re", "string",
                     "textwrap", "typing", "unittest", "logging", "pathlib", "subprocess", "threading", "email",
                     "csv", "datetime", "decimal", "fractions", "random", "statistics", "http.client", "shutil"]:
            try:
                mod = importlib.import_module(name)
            except Exception:
                continue
            for _, obj in inspect.getmembers(mod):
                doc = inspect.getdoc(obj)
                if doc and len(doc) > 200:
                    docs.append("\n\n".join(p for p in doc.replace("\n\n\n", "\n\n").split("\n\n")))
        docs = sorted(set(docs))
        valid = "\n\n\n".join(docs[::20])
        train = "\n\n\n".join(d for i, d in enumerate(docs) if i % 20)
        train = (train + "\n\n\n") * max(1, 600_000 // max(len(train), 1))
        print(f"no corpus at {corpus_dir}: synthetic mini corpus from docstrings: {len(train):,} + {len(valid):,}")
    with gzip.open(os.path.join(dst, "train.txt.gz"), "wb") as f:
        f.write(train.encode("utf-8"))
    with open(os.path.join(dst, "valid.txt"), "w", encoding="utf-8") as f:
        f.write(valid)


def run_train(extra, log_path):
    cmd = [sys.executable, os.path.join(HERE, "train.py")] + extra
    print("$ " + " ".join(cmd), flush=True)
    t0 = time.time()
    with open(log_path, "w") as logf:
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        logf.write(proc.stdout)
    tail = "\n".join(proc.stdout.splitlines()[-40:])
    print(tail)
    print(f"  (exit {proc.returncode}, {time.time() - t0:.0f} s, full log {log_path})", flush=True)
    return proc.returncode == 0


def safetensors_header(path):
    """{tensor name: dtype string} read from the file header (8-byte little-endian length + JSON)."""
    import struct
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
    return {k: v["dtype"] for k, v in header.items() if k != "__metadata__"}


def check_folder(folder, arch, layers):
    files = sorted(os.listdir(folder)) if os.path.isdir(folder) else []
    for need in ("config.json", "tokenizer.json", "tokenizer_config.json", "generation_config.json"):
        check(need in files, f"{arch}: {need} written")
    st = [f for f in files if f.endswith(".safetensors")]
    if not check(len(st) >= 1, f"{arch}: safetensors written ({st})"):
        return
    with open(os.path.join(folder, "config.json")) as f:
        cfg = json.load(f)
    names, dtypes = [], set()
    for fn in st:
        for k, dt in safetensors_header(os.path.join(folder, fn)).items():
            names.append(k)
            dtypes.add(dt)
    check(dtypes <= {"BF16"}, f"{arch}: all tensors bf16 ({dtypes})")
    check("lm_head.weight" not in names, f"{arch}: lm_head tied (not stored)")
    check(cfg.get("tie_word_embeddings") is True, f"{arch}: tie_word_embeddings true")
    check(not any("expert" in n or ".mlp.gate." in n for n in names), f"{arch}: no MoE tensors")
    vocab = cfg.get("vocab_size") or 0
    check(vocab % 64 == 0 and 0 < vocab <= 8192, f"{arch}: vocab_size {vocab} (8192 on the real corpus)")
    if arch == "llama":
        check(cfg.get("architectures") == ["LlamaForCausalLM"], f"llama: architectures {cfg.get('architectures')}")
        check("model.layers.0.self_attn.k_proj.weight" in names, "llama: k_proj present")
    else:
        check(cfg.get("architectures") == ["DeepseekV2ForCausalLM"], f"mla: architectures {cfg.get('architectures')}")
        check(cfg.get("q_lora_rank") is None, f"mla: q_lora_rank null ({cfg.get('q_lora_rank')})")
        check(cfg.get("first_k_dense_replace") == layers, f"mla: first_k_dense_replace == {layers}")
        for n in ("q_proj", "kv_a_proj_with_mqa", "kv_a_layernorm", "kv_b_proj", "o_proj"):
            check(f"model.layers.0.self_attn.{n}.weight" in names, f"mla: self_attn.{n} present")
        check(f"model.layers.{layers - 1}.mlp.gate_proj.weight" in names, "mla: last layer has a dense MLP")
        print("  mla config.json: " + json.dumps({k: cfg.get(k) for k in (
            "model_type", "q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim",
            "head_dim", "num_key_value_heads", "first_k_dense_replace", "n_routed_experts", "n_shared_experts",
            "num_experts_per_tok", "moe_intermediate_size", "rope_parameters", "rope_theta", "rope_scaling")}))
    with open(os.path.join(folder, "tokenizer.json")) as f:
        tj = json.load(f)
    pre = tj.get("pre_tokenizer") or {}
    subs = pre.get("pretokenizers", [])
    check(pre.get("type") == "Sequence" and len(subs) == 2 and subs[0].get("type") == "Split"
          and subs[1].get("type") == "ByteLevel" and subs[1].get("use_regex") is False,
          "tokenizer: pre_tokenizer = Sequence[Split(Llama-3 regex), ByteLevel(use_regex=false)]")
    check((tj.get("decoder") or {}).get("type") == "ByteLevel", "tokenizer: ByteLevel decoder")
    check((tj.get("post_processor") or {}).get("type") == "TemplateProcessing", "tokenizer: TemplateProcessing")
    specials = {t["content"]: t["id"] for t in tj.get("added_tokens", []) if t.get("special")}
    check(set(specials) >= {"<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>",
                            "<|eot_id|>"}, f"tokenizer: special tokens {specials}")
    check(cfg.get("bos_token_id") == specials.get("<|begin_of_text|>"), "config bos_token_id = <|begin_of_text|>")
    n_tok = len(tj["model"]["vocab"]) + len([t for t in tj.get("added_tokens", []) if t["id"] >= len(tj["model"]["vocab"])])
    check(n_tok <= vocab, f"tokenizer size {n_tok} fits vocab_size {vocab}")
    with open(os.path.join(folder, "tokenizer_config.json")) as f:
        tc = json.load(f)
    check("chat_template" in tc, "tokenizer_config: chat_template present")


def check_scorer(folder):
    """The sliding-window scorer against the model's own loss (labels=input_ids) on a text shorter than one
    window, and a two-window run against a single wide window on the same text."""
    import torch
    import eval_bpb
    device = "cuda" if torch.cuda.is_available() else "cpu"
    tok = eval_bpb.load_tokenizer(folder)
    model = eval_bpb.load_model(folder, device)
    bos = eval_bpb.bos_id(folder, tok)
    text = ("The committee met on a cold morning in March. Nobody had expected the report to be finished, "
            "and yet there it was, bound and numbered, on every chair.")
    ids = [bos] + tok.encode(text, add_special_tokens=False).ids
    nll, n = eval_bpb.sliding_window_nll(model, ids, context=512, stride=256, device=device)
    with torch.no_grad():
        x = torch.tensor([ids], device=device)
        ref = float(model(input_ids=x, labels=x, use_cache=False).loss) * (len(ids) - 1)
    check(n == len(ids) - 1 and abs(nll - ref) < 1e-3 * max(1.0, abs(ref)),
          f"scorer: one window equals the model's loss x tokens ({nll:.4f} vs {ref:.4f})")
    small, _ = eval_bpb.sliding_window_nll(model, ids, context=16, stride=8, batch_size=3, device=device)
    check(math.isfinite(small) and small > 0, f"scorer: context 16 / stride 8 runs ({small:.3f} nats)")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", default="/tmp/drift-smoke")
    ap.add_argument("--corpus", default=os.path.join(REPO, ".corpus"))
    ap.add_argument("--compile", action="store_true", help="also pass --compile to train.py")
    ap.add_argument("--steps", type=int, default=20)
    args = ap.parse_args()
    t0 = time.time()
    if os.path.exists(args.work):
        shutil.rmtree(args.work)
    os.makedirs(args.work)
    mini = os.path.join(args.work, "corpus")
    make_mini_corpus(args.corpus, mini)

    from eval_bpb import window_plan
    cover = []
    for b, e, s in window_plan(1000, 512, 256):
        cover += list(range(s, e))
    check(cover == list(range(1, 1000)), "window plan scores every token after BOS exactly once")

    common = ["--preset", "tiny", "--corpus", mini, "--work", args.work, "--tokenizer", "",
              "--seq-len", "128", "--batch-size", "8", "--warmup-steps", "5", "--log-every", "5",
              "--eval-every-seconds", "5", "--minutes", "6", "--reserve-seconds", "60",
              "--valid-max-bytes", "30000", "--tokenizer-mb", "3"]
    if args.compile:
        common.append("--compile")
    layers = 2
    results = {}
    for arch in ("llama", "mla"):
        print(f"\n=== {arch}: {args.steps} steps, tiny model", flush=True)
        extra = ["--arch", arch, "--max-steps", str(args.steps), "--out", os.path.join(args.work, "hf", arch)]
        if arch == "llama":
            extra.append("--retrain-tokenizer")
        ok = run_train(common + extra, os.path.join(args.work, f"{arch}.log"))
        if not check(ok, f"{arch}: train.py exited 0"):
            continue
        folder = os.path.join(args.work, "hf", arch)
        check_folder(folder, arch, layers)
        with open(os.path.join(folder, "training.json")) as f:
            meta = json.load(f)
        results[arch] = meta
        check(meta.get("steps") == args.steps, f"{arch}: ran {meta.get('steps')} steps")
        hist = [h["loss"] for h in meta.get("history", []) if "loss" in h]
        check(len(hist) >= 2 and hist[-1] < hist[0], f"{arch}: training loss fell ({hist[:1]} -> {hist[-1:]})")
        bpb = (meta.get("valid_bpb") or {}).get("bpb")
        check(bpb is not None and math.isfinite(bpb), f"{arch}: valid bpb computed ({bpb})")
        # eval_bpb.py standalone on the same folder and text prefix
        vfile = os.path.join(args.work, "valid-prefix.txt")
        with open(os.path.join(mini, "valid.txt"), "rb") as f:
            data = f.read()[:30000].decode("utf-8", "ignore")
        with open(vfile, "w", encoding="utf-8") as f:
            f.write(data)
        out_json = os.path.join(args.work, f"{arch}-eval.json")
        p = subprocess.run([sys.executable, os.path.join(HERE, "eval_bpb.py"), "--model", folder, "--file", vfile,
                            "--context", "128", "--stride", "64", "--json", out_json],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        print(p.stdout[-1500:])
        if check(p.returncode == 0, f"{arch}: eval_bpb.py standalone exited 0"):
            with open(out_json) as f:
                alone = json.load(f)["bpb"]
            check(bpb is not None and abs(alone - bpb) < 1e-4 * max(1.0, bpb),
                  f"{arch}: standalone bpb {alone:.5f} equals the one train.py printed {bpb:.5f}")
        check_scorer(folder)

    print("\n=== resume: 10 steps, then --resume to 20", flush=True)
    rwork = os.path.join(args.work, "resume-test")
    base = [a if a != args.work else rwork for a in common]
    base = [a for a in base]
    os.makedirs(rwork, exist_ok=True)
    shutil.copyfile(os.path.join(args.work, "tokenizer.json"), os.path.join(rwork, "tokenizer.json"))
    ok1 = run_train(base + ["--arch", "llama", "--max-steps", "10", "--total-train-minutes", "10"],
                    os.path.join(args.work, "resume1.log"))
    ok2 = ok1 and run_train(base + ["--arch", "llama", "--max-steps", "20", "--resume"],
                            os.path.join(args.work, "resume2.log"))
    if check(ok1 and ok2, "resume: both runs exited 0"):
        with open(os.path.join(rwork, "hf", "llama", "training.json")) as f:
            meta = json.load(f)
        check(meta.get("steps") == 20, f"resume: continued to step {meta.get('steps')}")
        with open(os.path.join(args.work, "resume2.log")) as f:
            check("resume: " in f.read(), "resume: the second run loaded the checkpoint")

    print(f"\nsmoke test finished in {time.time() - t0:.0f} s")
    for arch, meta in results.items():
        print(f"  {arch}: {meta.get('parameters'):,} parameters, bpb {(meta.get('valid_bpb') or {}).get('bpb')}")
    if FAILURES:
        print(f"SMOKE FAILED: {len(FAILURES)} check(s):")
        for f in FAILURES:
            print("  - " + f)
        return 1
    print("SMOKE OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
