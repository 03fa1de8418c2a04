#!/usr/bin/env python3
"""What patch 0002's switch alone costs: one library, one process, the switch on against off.

Usage: python tools/bench/switch_cost.py [--models smollm2-135m qwen3-0.6b-shape] [--rounds 24]
                                         [--kernels avx2] [--threads 2]

``patch_cost.py`` compares two libraries, each in its own fresh processes. What it measures is
everything that differs between them: the arithmetic patch 0002 changes, and also where the linker put
every hot loop (the two libraries' code differs, so its alignment does), and how each process's heap and
threads were laid out. On a noisy host whole processes run 20-30 % slow. This tool takes the library out
of the comparison. One process loads the model twice from the same libMNN:

- once as the engine loads it, with ``batch_independent_rows`` on;
- once with it off, where libMNN computes as upstream MNN does, bit for bit.

It then alternates their prefills and decodes, seconds apart, for ``--rounds`` rounds (who goes first
swaps every round). The ratio left is what the switch changes at run time:

- 0002's lone-row kernels and per-row quantisation of a lone row;
- 0009's grouped decode attention, which runs only with the switch on.

Instrumented on 2026-12-07, a 64-token-chunk prefill on the AVX2 kernels ran none of 0002's float
kernels and no Strassen product; the switch changed only the quantisation of the lone row each chunk's
logits come from.

``--kernels avx2`` runs the library built without AVX-512 code (``build/avx2-kernels/none``, made by
``patch_cost.py --kernels avx2``): the kernels an AVX2-only CPU runs. Ratios are on / off, the median
of the per-round ratios; each round's is saved (the report gives their middle half). Saved in
``switch_cost.json``, one run per CPU kind.
"""

from __future__ import annotations

import argparse

from common import (  # tools/bench is on sys.path
    cpu_kind,
    libmnn_env,
    machine,
    median,
    paired_ratio,
    round_ratios,
    run_worker,
    save_by_cpu,
    test_model,
    threads_named,
)
from patch_cost import AVX2_KIND, PROMPT_TEXT, avx2_build

WORKER = """
import hashlib, json, sys
from mnn_engine import Llm, _mnn
path, text = sys.argv[1], sys.argv[6]
gen, prompt_words, threads, rounds = map(int, sys.argv[2:6])  # gen 0: no decode measured
_mnn.set_prefill_chunk(64)  # the same chunks for both (batch_exact picks larger ones when it holds)
models = {name: Llm(path, thread_num=threads, prompt_cache=False, speculative="off", batch_independent_rows=on)
          for name, on in (("on", True), ("off", False))}
for llm in models.values():
    llm.load()
prompt = models["on"].tokenize(text)[:prompt_words]
for llm in models.values():
    llm.generate(prompt[:32], temperature=0, max_tokens=8, ignore_eos=True)  # warm-up
runs = {name: {"prefill_tps": [], "decode_tps": [], "tokens": set()} for name in models}
for r in range(rounds):  # common.alternating's order (this runs from /, where tools/bench is not importable)
    for name in (("on", "off") if r % 2 == 0 else ("off", "on")):
        llm, run = models[name], runs[name]
        run["prefill_tps"].append(llm.generate(prompt, temperature=0, max_tokens=1).prefill_tokens_per_second)
        if not gen:
            continue
        short = llm.generate(prompt[:16], temperature=0, max_tokens=gen, ignore_eos=True)
        run["decode_tps"].append(short.decode_tokens_per_second)
        run["tokens"].add(hashlib.sha256(repr(short.token_ids).encode()).hexdigest()[:16])
result = {name: {**run, "tokens": sorted(run["tokens"]), "batch_exact": models[name].batch_exact}
          for name, run in runs.items()}
for llm in models.values():
    llm.close()
print(json.dumps(result))
"""


def measure(path: str, gen: int, prompt: int, threads: int, rounds: int, libdir: str | None) -> dict:
    """Both loads' per-round speeds from one fresh process on the library in ``libdir`` (None: the install's)."""
    return run_worker(WORKER, path, gen, prompt, threads, rounds, PROMPT_TEXT, env=libmnn_env(libdir))


def summarise(runs: dict) -> dict:
    """A model's row: each measure's medians, on / off ratio and per-round ratios, what batch_exact said
    for each load, and the distinct greedy answers each gave (one each: both deterministic)."""
    row = {"batch_exact": {name: runs[name]["batch_exact"] for name in ("on", "off")},
           "answers": {name: len(runs[name]["tokens"]) for name in ("on", "off")}}
    for key in ("decode_tps", "prefill_tps"):
        on, off = runs["on"][key], runs["off"][key]
        if not on:  # not measured (--gen 0)
            continue
        row[key] = {"on": median(on), "off": median(off), "ratio": paired_ratio(on, off),
                    "per_round": round_ratios(on, off)}
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["smollm2-135m", "qwen3-0.6b-shape"])
    parser.add_argument("--rounds", type=int, default=24)
    parser.add_argument("--gen", type=int, default=256,
                        help="tokens decoded after a 16-token prompt (0: prefill only, the pair's runs seconds apart)")
    parser.add_argument("--prompt", type=int, default=512, help="prefill length (tokens)")
    parser.add_argument("--kernels", choices=["native", "avx2"], default="native",
                        help="avx2: the library without AVX-512 code (what an AVX2-only CPU runs)")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    kind = cpu_kind(machine())
    libdir = None
    if args.kernels == "avx2":
        libdir = str(avx2_build("none"))
        kind += AVX2_KIND
    kind += threads_named(args.threads)
    if not args.gen:  # kept beside the run of both measures
        kind += ", prefill only"
    results = {}
    for model in args.models:
        row = summarise(measure(str(test_model(model)), args.gen, args.prompt, args.threads, args.rounds, libdir))
        results[model] = row
        ratios = ", ".join(f"{key[:-4]} {row[key]['ratio']:.3f}x" for key in ("decode_tps", "prefill_tps")
                           if key in row)
        print(f"{model}: {ratios} (on / off); batch_exact {row['batch_exact']}", flush=True)
    report = {"machine": machine() | {"cpu": kind}, "kernels": args.kernels, "threads": args.threads,
              "gen": args.gen, "prompt": args.prompt, "rounds": args.rounds, "models": results}
    print(f"saved {save_by_cpu('switch_cost', report, kind)}")


if __name__ == "__main__":
    main()
