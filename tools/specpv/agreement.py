#!/usr/bin/env python3
"""SpecPV's cost in quality on a real model, on the CPU: greedy continuations of long inputs from the corpus
with prompt-lookup speculation verified against partial views, beside plain greedy decoding.

For each refresh interval it prints how many of the generated tokens equal plain decoding's, how far the
continuations agree before they first part, the verify steps that read a partial view, the tokens whose KV a
full verification computed again, and the accepted drafts per verify step. Budgets are scaled to the model's
context (the default model's is 512): the view keeps about a third of a long prompt.

    PYTHONPATH=build/python python3 tools/specpv/agreement.py [--docs 16] [--corpus .corpus/valid.txt]
"""
import argparse
import statistics

import drift


def documents(path, count, chars):
    """The first `chars` characters of the first `count` documents at least that long (blank-line separated)."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    docs = [d.strip() for d in text.split("\n\n") if len(d.strip()) >= chars]
    return [d[:chars] for d in docs[:count]]


def agreement(got, want):
    same = sum(a == b for a, b in zip(got, want))
    first = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), len(want))
    return same / len(want), first


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default="models/default")
    p.add_argument("--corpus", default=".corpus/valid.txt")
    p.add_argument("--docs", type=int, default=16)
    p.add_argument("--chars", type=int, default=2000, help="characters taken from each document before the cut")
    p.add_argument("--gen", type=int, default=64)
    p.add_argument("--refresh", type=int, nargs="+", default=[1, 2, 4, 8])
    p.add_argument("--retrieval", type=int, default=96, help="retrieval budget in tokens")
    p.add_argument("--score", default="quest", choices=["quest", "specpv"], help="the blocks' score form")
    args = p.parse_args()

    greedy = drift.SamplingParams(temperature=0, max_tokens=args.gen, ignore_eos=True)
    with drift.LLM(args.model) as llm:
        # Token ids cut so that prompt and continuation fit the context.
        limit = llm.max_model_len - args.gen
        prompts = [llm.encode(d)[:limit] for d in documents(args.corpus, args.docs, args.chars)]
        plain = [o.token_ids for o in llm.generate(prompts, greedy)]
    lengths = [len(p) for p in prompts]
    print(f"{len(prompts)} documents, prompts of {min(lengths)}..{max(lengths)} tokens, {args.gen} generated")
    budgets = {"min_context": 128, "sink": 16, "retrieval": args.retrieval, "window": 32, "buffer": 8,
               "score": args.score}
    print(f"budgets {budgets} (+ the drafts), prompt lookup of 4 tokens\n")
    print("| refresh | tokens equal to plain greedy | agree before parting (mean) | partial / full verifies | "
          "tokens computed again | accepted per verify |")
    print("|---:|---:|---:|---:|---:|---:|")
    for refresh in args.refresh:
        with drift.LLM(args.model, speculative={"method": "ngram", "num_tokens": 4},
                       specpv=dict(budgets, refresh=refresh)) as llm:
            outs = [o.token_ids for o in llm.generate(prompts, greedy)]
            m = llm.metrics()
        scores = [agreement(o, w) for o, w in zip(outs, plain)]
        equal = statistics.mean(s[0] for s in scores)
        first = statistics.mean(s[1] for s in scores)
        drafts = max(m["spec_decode_num_drafts"], 1)
        print(f"| {refresh} | {equal:.1%} | {first:.1f} of {args.gen} | {m['spec_decode_num_partial_verifies']} / "
              f"{m['spec_decode_num_full_verifies']} | {m['spec_decode_num_recomputed_tokens']} | "
              f"{m['spec_decode_num_accepted_tokens'] / drafts:.2f} |")


if __name__ == "__main__":
    main()
