#!/usr/bin/env python3
"""Long answers and the KV cache's growth: patch 0006 against MNN's 64-token steps.

Usage: python tools/bench/kv_growth.py [--models qwen3-0.6b-shape] [--gen 1536] [--rounds 4]

MNN 3.6.1 grows an attention layer's KV cache 64 tokens at a time, each time
into a new buffer the whole cache is copied to: one stall every 64 tokens, as
long as the copy, so growing with the context. Patch 0006 grows the cache by a
quarter of its length (at least 64 tokens). This decodes ``--gen`` greedy
tokens after a 16-token prompt (int4, 2 threads, speculation and the prompt
cache off) with our libMNN and with the same library without patch 0006
(build/unpatched-0006, built when missing by ``tools/mnn/build_unpatched.sh``),
fresh processes alternating, and times every token from the callback. A stall
is a token that took more than 3 times the median token; the report gives the
stalls' time beyond a median token, the longest, the decode rate over the
whole answer and over its last 256 tokens (where the cache is largest), the
peak RSS (what the larger capacity costs), and whether both builds gave the
same tokens (the capacity must change no result).
"""

from __future__ import annotations

import argparse

from common import (  # tools/bench is on sys.path
    alternating,
    libmnn_env,
    machine,
    median,
    paired_ratio,
    run_worker,
    save,
    test_model,
)
from patch_cost import unpatched_build

WORKER = """
import hashlib, json, resource, sys, time
from mnn_engine import Llm
path, gen = sys.argv[1], int(sys.argv[2])
with Llm(path, thread_num=2, prompt_cache=False, speculative="off") as llm:
    prompt = llm.tokenize("The lighthouse keeper watched the ships pass in the storm. " * 4)[:16]
    llm.generate(prompt, temperature=0, max_tokens=8, ignore_eos=True)  # warm-up
    stamps = []
    result = llm.generate(prompt, temperature=0, max_tokens=gen, ignore_eos=True,
                          callback=lambda piece: stamps.append(time.perf_counter()))
gaps = [b - a for a, b in zip(stamps, stamps[1:])]
typical = sorted(gaps)[len(gaps) // 2]
stalls = [g for g in gaps if g > 3 * typical]
tail = stamps[-257:]
print(json.dumps({"decode_tps": result.decode_tokens_per_second, "tail_tps": (len(tail) - 1) / (tail[-1] - tail[0]),
                  "stalls": len(stalls), "stall_ms": 1000 * sum(g - typical for g in stalls),
                  "longest_stall_ms": 1000 * max(stalls, default=0.0),
                  "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "tokens": hashlib.sha256(repr(result.token_ids).encode()).hexdigest()[:16]}))
"""

MEASURES = ("decode_tps", "tail_tps", "stall_ms", "longest_stall_ms", "stalls", "peak_rss_mib")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["qwen3-0.6b-shape"])
    parser.add_argument("--gen", type=int, default=1536)
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    env = {"patched": libmnn_env(None), "unpatched": libmnn_env(unpatched_build("0006"))}
    results = {}
    for model in args.models:
        path = str(test_model(model))
        runs: dict[str, list[dict]] = {name: [] for name in env}
        for name in alternating(args.rounds, list(env)):
            runs[name].append(run_worker(WORKER, path, args.gen, env=env[name]))
        row: dict = {key: {name: median([x[key] for x in runs[name]]) for name in env} for key in MEASURES}
        for key in ("decode_tps", "tail_tps"):
            row[key]["ratio"] = paired_ratio([x[key] for x in runs["patched"]], [x[key] for x in runs["unpatched"]])
        row["same_tokens"] = len({x["tokens"] for name in env for x in runs[name]}) == 1
        results[model] = row
        print(f"{model}: decode {row['decode_tps']['patched']:.1f} vs {row['decode_tps']['unpatched']:.1f} tok/s "
              f"({row['decode_tps']['ratio']:.3f}x), last 256 tokens {row['tail_tps']['ratio']:.3f}x; stalls "
              f"{row['stall_ms']['patched']:.0f} vs {row['stall_ms']['unpatched']:.0f} ms; peak RSS "
              f"{row['peak_rss_mib']['patched']:.0f} vs {row['peak_rss_mib']['unpatched']:.0f} MiB; "
              f"same tokens: {row['same_tokens']}", flush=True)
    report = {"machine": machine(), "gen": args.gen, "rounds": args.rounds, "models": results}
    print(f"saved {save('kv_growth', report)}")


if __name__ == "__main__":
    main()
