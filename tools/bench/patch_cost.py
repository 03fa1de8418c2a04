#!/usr/bin/env python3
"""What the batch-exactness MNN patch costs: decode and prefill, patched against unpatched.

Usage: python tools/bench/patch_cost.py [--unpatched DIR] [--models smollm2-135m qwen3-0.6b-shape] [--rounds 10]

DIR holds a ``libMNN.so`` built as the default build's but without
subprojects/packagefiles/MNN/0002-batch-independent-rows.patch: make it with
``tools/mnn/build_unpatched.sh 0002``, which this script runs when DIR (by
default build/unpatched-0002/lib) has none (once: MNN builds in ~25 min).
The extension finds libMNN through its RUNPATH, which ``LD_LIBRARY_PATH``
overrides, so one install runs both. Every measurement is a fresh process
(int4 low-memory mode, speculation and the prompt cache off, 2 threads, 64-token
prefill chunks for both), the
two builds alternate round by round, and the report gives paired ratios
(patched / unpatched, per round, median). Target (issue #47): both within 2 %, on
every kind of CPU; a run replaces the kept one of its CPU kind only.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

from common import (  # tools/bench is on sys.path
    REPO,
    RESULTS,
    machine,
    median,
    paired_ratio,
    run_worker,
    save,
    test_model,
)

UNPATCHED = REPO / "build" / "unpatched-0002" / "lib"

WORKER = """
import json, sys
from mnn_engine import Llm, _mnn
path, gen, prompt_words = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
_mnn.set_prefill_chunk(64)  # the same chunks for both builds (batch_exact picks larger ones when it holds)
with Llm(path, thread_num=2, prompt_cache=False, speculative="off") as llm:
    prompt = llm.tokenize(("The lighthouse keeper watched the ships pass in the storm. " * 64))[:prompt_words]
    llm.generate(prompt[:32], temperature=0, max_tokens=8, ignore_eos=True)  # warm-up
    long = llm.generate(prompt, temperature=0, max_tokens=1)
    short = llm.generate(prompt[:16], temperature=0, max_tokens=gen, ignore_eos=True)
    print(json.dumps({"batch_exact": llm.batch_exact, "prefill_tps": long.prefill_tokens_per_second,
                      "decode_tps": short.decode_tokens_per_second}))
"""


def run(path: str, gen: int, prompt: int, libdir: str | None) -> dict:
    env = dict(os.environ)
    if libdir:
        env["LD_LIBRARY_PATH"] = libdir + (":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
    return run_worker(WORKER, path, gen, prompt, env=env)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--unpatched", type=Path, default=UNPATCHED, help="directory holding the unpatched libMNN.so")
    parser.add_argument("--models", nargs="+", default=["smollm2-135m", "qwen3-0.6b-shape"])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--gen", type=int, default=256)
    parser.add_argument("--prompt", type=int, default=512, help="prefill length (tokens)")
    args = parser.parse_args()
    if not (args.unpatched / "libMNN.so").is_file():
        if args.unpatched != UNPATCHED:
            sys.exit(f"no libMNN.so in {args.unpatched}")
        subprocess.run(["bash", str(REPO / "tools" / "mnn" / "build_unpatched.sh"), "0002"], check=True)

    results = {}
    for model in args.models:
        path = str(test_model(model))
        runs: dict[str, list[dict]] = {"patched": [], "unpatched": []}
        for r in range(args.rounds):
            order = ["patched", "unpatched"] if r % 2 == 0 else ["unpatched", "patched"]
            for build in order:
                libdir = str(args.unpatched) if build == "unpatched" else None
                runs[build].append(run(path, args.gen, args.prompt, libdir))
        exact = {b: {x["batch_exact"] for x in runs[b]} for b in runs}
        row = {"batch_exact": {b: sorted(v) for b, v in exact.items()}}
        for key in ("decode_tps", "prefill_tps"):
            ours = [x[key] for x in runs["patched"]]
            base = [x[key] for x in runs["unpatched"]]
            row[key] = {"patched": median(ours), "unpatched": median(base), "ratio": paired_ratio(ours, base)}
        results[model] = row
        print(f"{model}: decode {row['decode_tps']['patched']:.1f} vs {row['decode_tps']['unpatched']:.1f} tok/s "
              f"({row['decode_tps']['ratio']:.3f}x), prefill {row['prefill_tps']['patched']:.0f} vs "
              f"{row['prefill_tps']['unpatched']:.0f} tok/s ({row['prefill_tps']['ratio']:.3f}x); "
              f"batch_exact {row['batch_exact']}", flush=True)
    report = {"machine": machine(), "gen": args.gen, "prompt": args.prompt, "rounds": args.rounds, "models": results}
    print(f"saved {save('patch_cost', by_cpu(report))}")


def by_cpu(report: dict) -> dict:
    """The kept results with this run's in place of the last one on the same kind of CPU (the patch's cost
    is the kernels', which differ per instruction set: every kind measured stays in the report)."""
    try:
        kept = json.loads((RESULTS / "patch_cost.json").read_text())
    except (OSError, ValueError):
        kept = {}
    runs = kept.get("by_cpu") or ({kept["machine"]["cpu"]: kept} if "machine" in kept else {})
    runs[report["machine"]["cpu"]] = report
    return {"by_cpu": runs}


if __name__ == "__main__":
    main()
