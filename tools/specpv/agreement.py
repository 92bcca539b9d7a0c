#!/usr/bin/env python3
"""SpecPV's cost in quality on a real model: greedy continuations of long corpus inputs, speculated (EAGLE-3
head or prompt lookup) and verified against partial views, beside plain greedy decoding and beside the same
speculation verified in full.

For each context length, retrieval budget and refresh interval it prints how many generated tokens equal
plain decoding's, how far the continuations agree before they first part, the verify steps that read a
partial view, the tokens whose KV a full verification computed again, and the tokens per verify step (tau:
1 + accepted drafts per verify) with partial views beside tau with full verification.

    PYTHONPATH=build/python python3 tools/specpv/agreement.py [--device cuda] [--method eagle3]
        [--contexts 2048 4096] [--retrieval 512 1024] [--refresh 1 4 8] [--docs 8] [--gen 64]

Inputs: the corpus's validation documents joined in order (blank lines between them) from a different
starting document for each input, cut to the context less the generated tokens.
"""
import argparse
import statistics

import drift


def long_inputs(path, count, chars):
    """`count` texts of at least `chars` characters, each the documents from the i-th one on, joined."""
    with open(path, encoding="utf-8") as f:
        docs = [d.strip() for d in f.read().split("\n\n\n") if d.strip()]
    texts = []
    for start in range(len(docs)):
        text = ""
        for d in docs[start:]:
            text += d + "\n\n\n"
            if len(text) >= chars:
                break
        if len(text) >= chars:
            texts.append(text)
        if len(texts) == count:
            break
    return texts


def agreement(got, want):
    same = sum(a == b for a, b in zip(got, want))
    first = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), len(want))
    return same / len(want), first


def speculative(args):
    if args.method == "eagle3":
        return {"method": "eagle3", "draft_dir": "auto", "num_tokens": args.tree, "depth": 6, "top_k": 4}
    return {"method": "ngram", "num_tokens": 4}


def run(args, prompts, greedy, **engine):
    """Outputs and metrics of one engine over all prompts."""
    with drift.LLM(args.model, device=args.device, max_num_seqs=len(prompts), **engine) as llm:
        outs = [o.token_ids for o in llm.generate(prompts, greedy)]
        return outs, llm.metrics()


def tau(m):
    return 1.0 + m["spec_decode_num_accepted_tokens"] / max(m["spec_decode_num_drafts"], 1)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default="models/default")
    p.add_argument("--device", default="cpu")
    p.add_argument("--corpus", default=".corpus/valid.txt")
    p.add_argument("--method", default="eagle3", choices=["eagle3", "ngram"])
    p.add_argument("--tree", type=int, default=32, help="EAGLE-3 tree tokens")
    p.add_argument("--docs", type=int, default=8)
    p.add_argument("--contexts", type=int, nargs="+", default=[2048, 4096], help="prompt + generated tokens")
    p.add_argument("--gen", type=int, default=64)
    p.add_argument("--refresh", type=int, nargs="+", default=[1, 4, 8])
    p.add_argument("--retrieval", type=int, nargs="+", default=[512, 1024], help="retrieval budgets in tokens")
    p.add_argument("--sink", type=int, default=32)
    p.add_argument("--window", type=int, default=128)
    p.add_argument("--buffer", type=int, default=20)
    p.add_argument("--score", default="specpv", choices=["quest", "specpv"], help="the blocks' score form")
    args = p.parse_args()

    greedy = drift.SamplingParams(temperature=0, max_tokens=args.gen, ignore_eos=True)
    print(f"model {args.model} on {args.device}, {args.method} drafts, {args.gen} greedy tokens per input, "
          f"sink {args.sink}, window {args.window}, buffer {args.buffer} (+ the drafts), score {args.score}\n")
    print("| context | retrieval | refresh | tokens equal to plain greedy | agree before parting (mean) | "
          "partial / full verifies | tokens computed again | tau partial | tau full |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for context in args.contexts:
        with drift.LLM(args.model, device=args.device) as llm:
            chars = 8 * context  # more than enough text: about 4 characters a token
            prompts = [llm.encode(t)[: context - args.gen] for t in long_inputs(args.corpus, args.docs, chars)]
        plain, _ = run(args, prompts, greedy)
        full, full_m = run(args, prompts, greedy, speculative=speculative(args))
        full_equal = statistics.mean(agreement(o, w)[0] for o, w in zip(full, plain))
        for retrieval in args.retrieval:
            for refresh in args.refresh:
                budgets = {"min_context": min(len(x) for x in prompts) // 2, "sink": args.sink, "retrieval": retrieval,
                           "window": args.window, "buffer": args.buffer, "score": args.score, "refresh": refresh}
                outs, m = run(args, prompts, greedy, speculative=speculative(args), specpv=budgets)
                scores = [agreement(o, w) for o, w in zip(outs, plain)]
                print(f"| {context} | {retrieval} | {refresh} | {statistics.mean(s[0] for s in scores):.1%} | "
                      f"{statistics.mean(s[1] for s in scores):.1f} of {args.gen} | "
                      f"{m['spec_decode_num_partial_verifies']} / {m['spec_decode_num_full_verifies']} | "
                      f"{m['spec_decode_num_recomputed_tokens']} | {tau(m):.2f} | {tau(full_m):.2f} |", flush=True)
        print(f"| {context} | full verification | | {full_equal:.1%} | | | | | {tau(full_m):.2f} |", flush=True)


if __name__ == "__main__":
    main()
