#!/usr/bin/env python3
"""What MNN's KV-cache quantisation costs in quality: perplexity on real weights.

Usage: python tools/bench/kv_quality.py [--threads 2]

SmolLM2-135M-Instruct (real weights, our int4 conversion) scores a fixed
English text with ``Llm.score`` (teacher forcing) under each accepted
``quant_qkv`` mode and ``attention_mode`` (the modes' KV quantisation with flash
attention, MNN's default path). Reported per mode: perplexity, its ratio to the float
cache's, and how far each token's log-probability moves from the float
cache's (mean and largest absolute difference, in nats). Deterministic:
one pass per mode.
"""

from __future__ import annotations

import argparse
import statistics

from common import machine, save, test_model  # tools/bench is on sys.path

PROMPT = "The following is an essay about a small coastal town.\n\n"
ESSAY = (
    "Every morning the fishing boats leave the harbour before the sun is up, and by the time the bakery opens "
    "its doors the first of them are already on their way back. The town has lived this way for as long as "
    "anyone can remember. Children learn the names of the boats before they learn the names of the streets, "
    "and the old men who sit on the sea wall can tell from the sound of an engine whose boat is coming in.\n\n"
    "In summer the town fills with visitors. They walk along the beach, buy ice cream from the kiosk next to "
    "the lifeboat station and take photographs of the lighthouse, which has been painted red and white for "
    "more than a hundred years. Most of them leave before the evening, when the wind turns and the fog rolls "
    "in from the sea. The people who stay learn quickly that the weather here changes by the hour.\n\n"
    "Winter is different. The cafes close, the car park is empty and the only sounds are the waves and the "
    "gulls. This is when the town belongs to the people who live in it. They repair nets, paint the boats and "
    "meet in the pub on Friday evenings to argue about football and the price of fuel. Nobody is in a hurry, "
    "and nobody needs to be.\n\n"
    "Some of the young people move away to study in the cities, and not all of them come back. Those who do "
    "often say that they missed the light more than anything else: the way it falls on the water late in the "
    "afternoon, and the way the whole bay seems to glow for a few minutes before the sun goes down."
)
#: (MNN config key, value): the legacy ``quant_qkv`` modes (no flash attention), and ``attention_mode``
#: (flash attention * 8 + the KV quantisation: 8 the default, 9 int8 keys, 10 int8 keys and values; MNN
#: would run 10 as 9 with reuse_kv set at load, but mnn-engine sets it after the load: llm.cpp setRuntimeHint)
CASES = (("quant_qkv", 0), ("quant_qkv", 1), ("quant_qkv", 2),
         ("attention_mode", 8), ("attention_mode", 9), ("attention_mode", 10))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    from mnn_engine import Llm

    model = test_model("smollm2-135m")
    scores = {}
    for key, value in CASES:
        llm = Llm(model, thread_num=args.threads, prompt_cache=False, **{key: value}).load()
        try:
            scores[(key, value)] = llm.score(PROMPT, ESSAY)
        finally:
            llm.close()
    rows = {}
    for (key, value), scored in scores.items():
        base = scores[next(case for case in CASES if case[0] == key)]  # each key against its unquantised mode
        diffs = [abs(a - b) for a, b in zip(scored.logprobs, base.logprobs, strict=True)]
        name = str(value) if key == "quant_qkv" else f"attention_mode {value}"
        rows[name] = {"perplexity": scored.perplexity, "perplexity_ratio": scored.perplexity / base.perplexity,
                      "mean_abs_logprob_diff": statistics.fmean(diffs), "max_abs_logprob_diff": max(diffs)}
        r = rows[name]
        print(f"{key} {value}: perplexity {r['perplexity']:.3f} ({r['perplexity_ratio']:.4f}x unquantised)  "
              f"|d logprob| mean {r['mean_abs_logprob_diff']:.4f}, max {r['max_abs_logprob_diff']:.3f} nats",
              flush=True)
    record = {"machine": machine(), "model": str(model), "tokens": len(scores[CASES[0]].logprobs), "modes": rows}
    print(f"saved {save('kv_quality', record)}")


if __name__ == "__main__":
    main()
