#!/usr/bin/env python3
"""Where a prefill over a kept KV cache matches a fresh prefill, bit for bit.

Usage: python tools/bench/cache_exactness.py [--model smollm2-135m] [--kept 20,21,...] [--max-new 50]

For each kept length K and new length S, the prompt's first K tokens are
prefilled and kept (the prompt cache), then the next S tokens are prefilled
over them; the first generated token's top-5 log-probabilities are compared
with a fresh prefill of all K + S tokens. One row per K, one character per S:
``.`` identical, ``x`` different. Unpatched, MNN 3.6.1 on x86-64 AVX2 gives
identical results with prefills in one batch (``--chunk 0``) only where the
split falls right against its row tiling (a period of 24 tokens for short
prompts, another beyond), and mnn-engine's aligned chunks made every split
identical by keeping whole chunks only. With patch 0002 (``Llm.batch_exact``)
a row's result does not depend on its batch: every split is identical at
any chunk size, ``--chunk 0`` included, and the cache keeps any prefix. Re-run
it on a new MNN or another CPU.
"""

from __future__ import annotations

import argparse

from common import machine, save, test_model  # tools/bench is on sys.path

TEXT = "The history of the sea is long and full of storms, ships, and sailors who told stories about monsters. " * 8


def first_token_top(llm, ids: list[int], cached: bool) -> tuple:
    result = llm.generate(ids, temperature=0, max_tokens=1, logprobs=True, top_logprobs=5, cache_prompt=cached)
    return result.logprobs[0].top


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--kept", default="20,21,22,23,24,25,26,47,48,72,96")
    parser.add_argument("--max-new", type=int, default=50)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--chunk", type=int, default=None, help="prefill chunk (0: one batch; default: the engine's)")
    args = parser.parse_args()

    from mnn_engine import Llm, _mnn

    if args.chunk is not None:
        _mnn.set_prefill_chunk(args.chunk)

    path = test_model(args.model)
    with Llm(path, thread_num=args.threads) as cached, Llm(path, thread_num=args.threads) as fresh:
        ids = cached.tokenize(TEXT)
        kept = [int(k) for k in args.kept.split(",")]
        new = range(2, args.max_new)  # the cache always prefills at least two tokens
        rows = {}
        for k in kept:
            row = ""
            for s in new:
                cached.forget_prompt_cache()
                cached.generate(ids[:k], temperature=0, max_tokens=1, cache_prompt=True)
                same = first_token_top(cached, ids[:k + s], True) == first_token_top(fresh, ids[:k + s], False)
                row += "." if same else "x"
            rows[k] = row
            print(f"kept {k:4d}  new 2..{args.max_new - 1}  {row}", flush=True)
    exact = sum(row.count(".") for row in rows.values())
    total = sum(len(row) for row in rows.values())
    print(f"identical in {exact} of {total} splits")
    save("cache_exactness", {"machine": machine(), "model": args.model, "threads": args.threads,
                             "chunk": _mnn.prefill_chunk(),
                             "new_from": 2, "rows": rows, "identical": exact, "splits": total})


if __name__ == "__main__":
    main()
