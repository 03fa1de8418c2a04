#!/usr/bin/env python3
"""The default thread count against every other, on this machine.

Usage: python tools/bench/threads.py [--models smollm2-135m qwen3-0.6b-shape] [--rounds 5] [--gen 64]

Every thread count from 1 to the usable cores (at most 8) gets its own loaded
model; the rounds interleave them (one greedy generation of --gen tokens
each, after a fixed prompt), so a slow phase of the machine hits every count
alike. Reported per count: decode and prefill tok/s (medians), and the
default (``mnn_engine.runtime.device.default_threads``) against the fastest count as
a ratio of per-round values. Target (issue #12): default >= 0.95x the best,
which is what ``bench --tune`` would pick.
"""

from __future__ import annotations

import argparse
import os

from common import machine, median, paired_ratio, save, test_model  # tools/bench is on sys.path

PROMPT = "Write a long story about a lighthouse keeper and the ships she guides through the storms. " * 3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["smollm2-135m", "qwen3-0.6b-shape"])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--gen", type=int, default=64)
    args = parser.parse_args()

    from mnn_engine import Llm
    from mnn_engine.runtime.device import default_threads

    default = default_threads()
    counts = list(range(1, min(len(os.sched_getaffinity(0)), 8) + 1))
    results = {}
    for model in args.models:
        path = test_model(model)
        llms = {n: Llm(path, thread_num=n, prompt_cache=False).load() for n in counts}
        decode: dict[int, list[float]] = {n: [] for n in counts}
        prefill: dict[int, list[float]] = {n: [] for n in counts}
        try:
            for r in range(args.rounds):
                for n in (counts if r % 2 == 0 else counts[::-1]):
                    result = llms[n].generate(PROMPT, temperature=0, max_tokens=args.gen, ignore_eos=True)
                    decode[n].append(result.decode_tokens_per_second)
                    prefill[n].append(result.prefill_tokens_per_second)
        finally:
            for llm in llms.values():
                llm.close()
        best = max(counts, key=lambda n: median(decode[n]))
        ratio = paired_ratio(decode[default], decode[best])
        results[model] = {"default": default, "best": best, "default_vs_best": ratio,
                          "decode_tps": {n: median(decode[n]) for n in counts},
                          "prefill_tps": {n: median(prefill[n]) for n in counts}}
        print(f"{model}: " + "  ".join(f"{n}t {median(decode[n]):.1f}/{median(prefill[n]):.0f}" for n in counts)
              + f" tok/s decode/prefill; default {default}t vs best {best}t: {ratio:.3f}x", flush=True)
    print(f"saved {save('threads', {'machine': machine(), 'gen': args.gen, 'models': results})}")


if __name__ == "__main__":
    main()
