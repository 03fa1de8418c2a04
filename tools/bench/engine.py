#!/usr/bin/env python3
"""Our Cython generation loop versus MNN's own loop, on one loaded model.

Usage: python tools/bench/engine.py [--model DIR] [--threads 1 2] [--prompt-len 128]
                                    [--gen 128] [--iters 11] [--json OUT.json]

Both loops run in the same process on the same loaded model (the same
extension reaches ``Llm::response`` with a stream buffer for MNN's side),
interleaved run by run so machine noise hits both alike. Both are greedy and
generate exactly ``--gen`` tokens from the same ``--prompt-len`` prompt ids.
Both are timed the same way, from the clock around the call and per-token
timestamps:

- prefill tokens/s = prompt tokens / time from the call to the first token
- decode tokens/s  = (tokens - 1) / time from the first token to the last

For our loop, the time spent outside MNN's forwards (sampling, stop checks,
detokenising, the callback) is also reported per token: the part of the
ratio that is ours, measured without the machine's noise between runs.

"ours+callback" hands every piece to a Python callback (the GIL is taken once
per token), as streaming users do; "ours" runs without one. Figures are
medians over ``--iters`` runs; ratios are ours / MNN (target: >= 0.99): the
ratio of the medians, the ratio of the best runs, and the paired ratio (the
median of each round's ours / MNN, which cancels the machine's slow drifts).
The default model is the Qwen3-0.6B-shape test model (built with
``tools/models/build_test_models.py --big``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from common import machine, paired_ratio, save, test_model  # tools/bench is on sys.path when run as a script


def ours(llm, ids: list[int], gen: int, with_callback: bool) -> dict[str, float]:
    callback = (lambda _piece: None) if with_callback else None  # the cost of a Python callback per piece
    result = llm.generate(ids, callback=callback, temperature=0, max_tokens=gen, ignore_eos=True)
    assert result.completion_tokens == gen, result
    return {
        "prefill_tps": len(ids) / (result.time_to_first_token_ms / 1e3),
        "decode_tps": (gen - 1) / (result.decode_ms / 1e3),
        # decode time outside MNN's forwards (sampling, stop checks, detokenising, callback), per token
        "own_us_per_token": (result.decode_ms - result.decode_forward_ms) * 1e3 / result.decode_steps,
        "own_share": (result.decode_ms - result.decode_forward_ms) / result.decode_ms,
    }


def mnn(llm, ids: list[int], gen: int) -> dict[str, float]:
    run = llm.mnn_response(ids, gen)
    tokens = run["tokens"]
    assert tokens >= gen - 1, run
    return {
        "prefill_tps": len(ids) / ((run["first_token_ns"] - run["start_ns"]) / 1e9),
        "decode_tps": (tokens - 1) / ((run["last_token_ns"] - run["first_token_ns"]) / 1e9),
        "mnn_prefill_tps_own_counter": run["prompt_len"] / (run["prefill_us"] / 1e6) if run["prefill_us"] else 0.0,
        "mnn_decode_tps_own_counter": run["gen_seq_len"] / (run["decode_us"] / 1e6) if run["decode_us"] else 0.0,
    }


def bench(model: Path, threads: int, prompt_len: int, gen: int, iters: int) -> dict:
    from mnn_engine import Llm
    from mnn_engine.cli.bench import prompt_ids

    started = time.perf_counter()
    llm = Llm(model, prompt_cache=False, thread_num=threads, sampler_type="greedy", max_new_tokens=gen,
              max_all_tokens=max(2048, prompt_len + gen + 8)).load()
    load_s = time.perf_counter() - started
    ids = prompt_ids(llm, prompt_len)
    runners = {
        "mnn": lambda: mnn(llm, ids, gen),
        "ours": lambda: ours(llm, ids, gen, with_callback=False),
        "ours+callback": lambda: ours(llm, ids, gen, with_callback=True),
    }
    for run in runners.values():  # warm-up, not measured
        run()
    samples: dict[str, list[dict[str, float]]] = {name: [] for name in runners}
    for i in range(iters):
        order = list(runners) if i % 2 == 0 else list(reversed(runners))
        for name in order:
            samples[name].append(runners[name]())
    llm.close()
    medians = {
        name: {key: statistics.median(s[key] for s in runs) for key in runs[0]}
        for name, runs in samples.items()
    }
    bests = {name: {key: max(s[key] for s in runs) for key in runs[0]} for name, runs in samples.items()}

    def ratios_of(stat: dict) -> dict:
        return {name: {"prefill": stat[name]["prefill_tps"] / stat["mnn"]["prefill_tps"],
                       "decode": stat[name]["decode_tps"] / stat["mnn"]["decode_tps"]}
                for name in ("ours", "ours+callback")}

    def series(name: str, phase: str) -> list[float]:
        return [s[f"{phase}_tps"] for s in samples[name]]

    paired = {name: {phase: paired_ratio(series(name, phase), series("mnn", phase)) for phase in ("prefill", "decode")}
              for name in ("ours", "ours+callback")}
    return {"model": str(model), "threads": threads, "prompt_len": prompt_len, "gen": gen, "iters": iters,
            "load_s": load_s, "medians": medians, "bests": bests, "ratios": ratios_of(medians),
            "best_ratios": ratios_of(bests), "paired_ratios": paired, "samples": samples}


def report(result: dict) -> str:
    med, rat = result["medians"], result["ratios"]
    lines = [
        f"model {result['model']}  threads {result['threads']}  prompt {result['prompt_len']}  "
        f"gen {result['gen']}  iters {result['iters']}  load {result['load_s']:.2f}s",
        f"{'loop':<15}{'prefill tok/s':>15}{'decode tok/s':>15}{'prefill ratio':>15}{'decode ratio':>15}"
        f"{'best-of ratios':>18}{'paired ratios':>18}",
    ]
    best, paired = result["best_ratios"], result["paired_ratios"]
    one = {"prefill": 1.0, "decode": 1.0}
    for name in ("mnn", "ours", "ours+callback"):
        r, b, p = rat.get(name, one), best.get(name, one), paired.get(name, one)
        own = med[name].get("own_us_per_token")
        lines.append(f"{name:<15}{med[name]['prefill_tps']:>15.1f}{med[name]['decode_tps']:>15.2f}"
                     f"{r['prefill']:>15.3f}{r['decode']:>15.3f}{b['prefill']:>9.3f}{b['decode']:>9.3f}"
                     f"{p['prefill']:>9.3f}{p['decode']:>9.3f}"
                     + (f"   own work {own:.0f} us/token ({med[name]['own_share'] * 100:.2f} % of decode)"
                        if own is not None else ""))
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=None)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--prompt-len", type=int, default=128)
    parser.add_argument("--gen", type=int, default=128)
    parser.add_argument("--iters", type=int, default=11)
    parser.add_argument("--json", type=Path, default=None, help="write all samples and medians here")
    args = parser.parse_args()
    model = args.model or test_model("qwen3-0.6b-shape")
    results = []
    for threads in args.threads:
        result = bench(model, threads, args.prompt_len, args.gen, args.iters)
        print(report(result), flush=True)
        results.append(result)
    record = {"machine": machine(), "results": results}
    print(f"saved {save('loop', record)}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(record, indent=2))


if __name__ == "__main__":
    main()
