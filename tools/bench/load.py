#!/usr/bin/env python3
"""Load time: MNN with and without its memory-mapped weights cache, cold and warm, against llama.cpp.

Usage: python tools/bench/load.py [--threads 2] [--rounds 3]

Every measurement is a fresh process loading the Qwen3-0.6B-shape model
(MNN int4; llama.cpp Q4_0 from ``peers.py``). Two times each: load, the
engine's own load call (for MNN everything a user waits for: the cache
check, our model-file validation and MNN's ``load()``, without our warm-up
forward; the ``Llama(...)`` constructor, which maps the GGUF and repacks
Q4_0), and ready,
load plus one single-token forward: with memory-mapped weights part of the
reading moves into the first forward, so ready is the fair comparison and
the one the ratios use. Cases:

- first load: MNN with ``use_mmap`` and an empty cache directory, so it
  prepares the weights and writes them to the cache (once per model);
- warm: model files (and MNN's cache) in the page cache;
- cold: the page cache dropped first (``/proc/sys/vm/drop_caches``, needs
  root; the cold rows are skipped without it), as after a reboot.

Medians over ``--rounds``; engines alternate within a round.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

from common import machine, median, save, test_model  # tools/bench is on sys.path
from peers import ensure_llama_cpp, qwen_q4_0, run

MNN_LOAD = """
import json, sys, time
from pathlib import Path
from mnn_engine import Llm, LoadOptions
from mnn_engine.store.models import prepare_cache
path, threads, mmap, cache = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1", Path(sys.argv[4])
start = time.perf_counter()
prepare_cache(cache, Path(path))
# validates the files too
llm = Llm(path, **LoadOptions(threads=threads, use_mmap=mmap, prompt_cache=False).llm_arguments(cache)).load()
ready = time.perf_counter() - start
print(json.dumps({"load_s": ready - llm.warmup_seconds, "ready_s": ready}))
"""

LLAMA_LOAD = """
import json, sys, time
from llama_cpp import Llama
start = time.perf_counter()
llm = Llama(model_path=sys.argv[1], n_ctx=512, n_batch=512, n_ubatch=512, n_threads=int(sys.argv[2]), verbose=False)
loaded = time.perf_counter()
llm.eval([llm.token_bos()])
print(json.dumps({"load_s": loaded - start, "ready_s": time.perf_counter() - start}))
"""

DROP_CACHES = Path("/proc/sys/vm/drop_caches")


def can_drop_caches() -> bool:
    return os.access(DROP_CACHES, os.W_OK)


def drop_caches() -> None:
    os.sync()
    DROP_CACHES.write_text("3\n")


def mnn_load(model: Path, threads: int, mmap: bool, cache: Path) -> dict[str, float]:
    out = run(sys.executable, "-c", MNN_LOAD, model, threads, "1" if mmap else "0", cache, cwd="/")
    return json.loads(out.strip().splitlines()[-1])


def llama_load(gguf: Path, threads: int) -> dict[str, float]:
    out = run(ensure_llama_cpp(), "-c", LLAMA_LOAD, gguf, threads, cwd="/")
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    model, gguf = test_model("qwen3-0.6b-shape"), qwen_q4_0()
    cold = can_drop_caches()
    if not cold:
        print("cannot write /proc/sys/vm/drop_caches (not root): cold rows skipped", file=sys.stderr)
    work = Path(tempfile.mkdtemp(prefix="mnn-load-bench-"))
    warm_cache = work / "warm-cache"
    mnn_load(model, args.threads, True, warm_cache)  # unmeasured: writes the cache the warm rows use
    cases = {
        "mnn, mmap cache, first load": lambda r: mnn_load(model, args.threads, True, work / f"first-{r}"),
        "mnn, mmap cache, warm": lambda r: mnn_load(model, args.threads, True, warm_cache),
        "mnn, no mmap, warm": lambda r: mnn_load(model, args.threads, False, work / "no-mmap"),
        "llama.cpp Q4_0, warm": lambda r: llama_load(gguf, args.threads),
    }
    if cold:
        cases |= {
            "mnn, mmap cache, cold": lambda r: (drop_caches(), mnn_load(model, args.threads, True, warm_cache))[1],
            "mnn, no mmap, cold": lambda r: (drop_caches(), mnn_load(model, args.threads, False, work / "no-mmap"))[1],
            "llama.cpp Q4_0, cold": lambda r: (drop_caches(), llama_load(gguf, args.threads))[1],
        }
    samples: dict[str, list[dict[str, float]]] = {name: [] for name in cases}
    try:
        for r in range(args.rounds):
            order = list(cases) if r % 2 == 0 else list(reversed(cases))
            for name in order:
                samples[name].append(cases[name](r))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    medians = {name: {key: median([s[key] for s in runs]) for key in ("load_s", "ready_s")}
               for name, runs in samples.items()}
    for name, value in medians.items():
        print(f"{name:<30} load {value['load_s']:6.2f} s  ready {value['ready_s']:6.2f} s", flush=True)
    ratios = {kind: medians[f"mnn, mmap cache, {kind}"]["ready_s"] / medians[f"llama.cpp Q4_0, {kind}"]["ready_s"]
              for kind in (("warm", "cold") if cold else ("warm",))}
    print("MNN (default: mmap cache) / llama.cpp, time to ready: "
          + ", ".join(f"{kind} {value:.2f}x" for kind, value in ratios.items()))
    record = {"machine": machine(), "threads": args.threads, "rounds": args.rounds, "model": str(model),
              "medians": medians, "samples": samples, "ready_mnn_over_llama_cpp": ratios}
    print(f"saved {save('load', record)}")


if __name__ == "__main__":
    main()
