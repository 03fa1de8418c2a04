#!/usr/bin/env python3
"""Prefill speed by the chunk size prompts are prefilled in.

Usage: python tools/bench/prefill_chunk.py [--models smollm2-135m qwen3-0.6b-shape] [--prompt 1024] [--rounds 4]

A fresh prompt of --prompt tokens is prefilled in chunks of 64, 128, 256
tokens or whole (one forward), each size in its own process per round, the
sizes rotating every round; int4 low-memory mode, 2 threads. Reported:
prefill tok/s medians and each size against 64 (the paired median ratio).
With MNN's rows batch-independent (patch 0002, ``Llm.batch_exact``) every
size gives the same logits, so the engine may prefill in whichever is fastest.
"""

from __future__ import annotations

import argparse

from common import machine, median, paired_ratio, run_worker, save, test_model  # tools/bench is on sys.path

SIZES = [64, 128, 256, 0]
WORKER = """
import json, sys
from mnn_engine import Llm, _mnn
path, chunk, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
_mnn.set_prefill_chunk(chunk)
with Llm(path, thread_num=2, prompt_cache=False, speculative="off") as llm:
    ids = llm.tokenize("The lighthouse keeper watched the ships pass in the storm. " * 200)[:n]
    llm.generate(ids[:64], temperature=0, max_tokens=1)  # warm-up
    best = max(llm.generate(ids, temperature=0, max_tokens=1).prefill_tokens_per_second for _ in range(2))
    print(json.dumps({"prefill_tps": best}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["smollm2-135m", "qwen3-0.6b-shape"])
    parser.add_argument("--prompt", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    results = {}
    for model in args.models:
        path = str(test_model(model))
        tps: dict[int, list[float]] = {s: [] for s in SIZES}
        for r in range(args.rounds):
            for size in SIZES[r % len(SIZES):] + SIZES[:r % len(SIZES)]:
                tps[size].append(run_worker(WORKER, path, size, args.prompt)["prefill_tps"])
        results[model] = {str(s): {"prefill_tps": median(v), "vs_64": paired_ratio(v, tps[64])}
                          for s, v in tps.items()}
        print(f"{model}: " + "  ".join(f"{s or 'whole'}: {median(v):.0f} tok/s ({paired_ratio(v, tps[64]):.3f}x)"
                                       for s, v in tps.items()), flush=True)
    report = {"machine": machine(), "prompt": args.prompt, "rounds": args.rounds, "models": results}
    print(f"saved {save('prefill_chunk', report)}")


if __name__ == "__main__":
    main()
