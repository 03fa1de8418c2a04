#!/usr/bin/env python3
"""What an MNN patch costs (or saves): decode and prefill, patched against unpatched.

Usage: python tools/bench/patch_cost.py [--patch 0002] [--unpatched DIR] [--models smollm2-135m qwen3-0.6b-shape]
                                        [--rounds 10] [--kernels avx2] [--weights mapped] [--threads 2]

``--patch`` names the patch left out of the baseline (default 0002, the
batch-exactness patch, whose cost issue #47 bounds; 0005, a faster kernel,
0007, the thread pool's waits, 0008, the int4 kernels' prefetch, 0009,
decode's attention reading a key/value head once, 0010, the float
few-row kernels' prefetch, 0011, a prefill's serial steps on all
threads, and 0012, the int4 kernel's prefetch into L2 on AMD, are measured
the same way and saved apart, in patch_cost_PATCH.json).

DIR holds a ``libMNN.so`` built as the default build's but without the patch
(subprojects/packagefiles/MNN/0002-batch-independent-rows.patch by default) and
the patches whose description says they need it (0009 needs 0002):
``tools/mnn/build_unpatched.sh 0002`` makes it, which this script runs when DIR
(by default build/unpatched-PATCH/lib) has none (again when a patch is newer: MNN
builds in ~25 min, a few with ccache).
The extension finds libMNN through its RUNPATH, which ``LD_LIBRARY_PATH``
overrides, so one install runs both. Every measurement is a fresh process
(int4 low-memory mode, speculation and the prompt cache off, 2 threads unless
``--threads`` says otherwise (the row then names it), 64-token
prefill chunks for both), the
two builds alternate round by round, and the report gives paired ratios
(patched / unpatched, per round, median; each round's is saved, and the report
gives the middle half of them beside the median). Target (issue #47): both within 2 %, on
every kind of CPU; a run replaces the kept one of its CPU kind only. ``--gen``
(default 256 tokens after a 16-token prompt) sets how long the measured answer
is, so how long a cache its last tokens attend to; another length names itself
in the row.

``--weights mapped`` loads as the engine loads a store model (the weights
mapped from a prepared cache, file pages) instead of MNN's own load into
anonymous memory: patch 0008 (the int4 kernels prefetch their weights) saves
more there, where a core's prefetcher stops at every 4 KiB page. The row's CPU
kind names it, so it is kept beside the in-memory run.

``--kernels avx2`` measures the kernels an AVX2-only CPU runs on a CPU that
also has AVX-512: both libraries are then built with ``-DMNN_AVX512=OFF``
(under build/avx2-kernels/, by ``build_unpatched.sh`` the same way), so MNN's
dispatcher picks its AVX2/FMA kernels as it does where AVX-512 is missing. The
kernels are the same; the core running them is not (an AVX2-only CPU is an
older design), and the report names both.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from common import (  # tools/bench is on sys.path
    REPO,
    alternating,
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

AVX2_KERNELS = REPO / "build" / "avx2-kernels"
WEIGHTS = {"memory": "weights in memory (MNN's own load)",
           "mapped": "weights mapped from the prepared cache (the engine's default)"}
AVX512_SYMBOL = b"_AVX512_MNNGemmInt8AddBiasScale"  # a kernel only a libMNN with AVX-512 code holds
#: what a run on the AVX2-only library adds to its CPU kind (switch_cost.py's runs too)
AVX2_KIND = ", AVX2 kernels (AVX-512 compiled out of libMNN)"
#: the text a measured prefill tokenizes (switch_cost.py prefills the same)
PROMPT_TEXT = "The lighthouse keeper watched the ships pass in the storm. " * 64

WORKER = """
import hashlib, json, sys
from pathlib import Path
from mnn_engine import Llm, LoadOptions, _mnn
from mnn_engine.store.models import prepare_cache
path, gen, prompt_words, cache, threads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], int(sys.argv[5])
text = sys.argv[6]
_mnn.set_prefill_chunk(64)  # the same chunks for both builds (batch_exact picks larger ones when it holds)
arguments = {"thread_num": threads, "prompt_cache": False, "speculative": "off"}
if cache:  # as the engine loads a store model: the weights mapped from the prepared cache
    prepare_cache(Path(cache), Path(path))
    arguments = LoadOptions(threads=threads, prompt_cache=False, speculative="off").llm_arguments(Path(cache))
with Llm(path, **arguments) as llm:
    prompt = llm.tokenize(text)[:prompt_words]
    llm.generate(prompt[:32], temperature=0, max_tokens=8, ignore_eos=True)  # warm-up
    long = llm.generate(prompt, temperature=0, max_tokens=1)
    short = llm.generate(prompt[:16], temperature=0, max_tokens=gen, ignore_eos=True)
    print(json.dumps({"batch_exact": llm.batch_exact, "prefill_tps": long.prefill_tokens_per_second,
                      "decode_tps": short.decode_tokens_per_second,
                      "tokens": hashlib.sha256(repr(short.token_ids).encode()).hexdigest()[:16]}))
"""


def run(path: str, gen: int, prompt: int, libdir: str | Path | None, cache: Path | None = None,
        threads: int = 2) -> dict:
    """One measurement in a fresh process; ``cache``: map the weights from this prepared cache."""
    return run_worker(WORKER, path, gen, prompt, cache or "", threads, PROMPT_TEXT, env=libmnn_env(libdir))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--patch", default="0002", help="the patch measured (its file name's prefix)")
    parser.add_argument("--unpatched", type=Path, help="directory holding the libMNN.so without it "
                        "(default build/unpatched-PATCH/lib, built when missing)")
    parser.add_argument("--models", nargs="+", default=["smollm2-135m", "qwen3-0.6b-shape"])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--gen", type=int, default=256)
    parser.add_argument("--prompt", type=int, default=512, help="prefill length (tokens)")
    parser.add_argument("--kernels", choices=["native", "avx2"], default="native",
                        help="avx2: both builds without AVX-512 code (what an AVX2-only CPU runs)")
    parser.add_argument("--weights", choices=list(WEIGHTS), default="memory",
                        help="mapped: the weights mapped from a prepared cache, as the engine loads a store model "
                             "(memory: MNN's own load into anonymous memory)")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    kind = cpu_kind(machine())
    if args.kernels == "avx2":
        libs = {"patched": avx2_build("none"), "unpatched": avx2_build(args.patch)}
        kind += AVX2_KIND
    else:
        libs = {"patched": None, "unpatched": args.unpatched or unpatched_build(args.patch)}
        if not (libs["unpatched"] / "libMNN.so").is_file():
            sys.exit(f"no libMNN.so in {libs['unpatched']}")

    if args.weights != "memory":
        kind += f", {WEIGHTS[args.weights]}"
    kind += threads_named(args.threads)
    if args.gen != 256:  # and an answer's length other than the usual one (a longer one decodes on a longer cache)
        kind += f", {args.gen} tokens decoded"

    results = {}
    with tempfile.TemporaryDirectory(prefix="patch-cost-") as scratch:
        for model in args.models:
            path = str(test_model(model))
            runs: dict[str, list[dict]] = {"patched": [], "unpatched": []}
            # a prepared cache per build and model: what a load caches is keyed by the library among other things
            caches = {b: Path(scratch) / f"{model}-{b}" if args.weights == "mapped" else None for b in libs}
            for build in alternating(args.rounds, list(libs)):
                runs[build].append(run(path, args.gen, args.prompt, libs[build], caches[build], args.threads))
            exact = {b: {x["batch_exact"] for x in runs[b]} for b in runs}
            # one greedy answer from every run of both builds: a patch that keeps the bits changes no token;
            # a patch that changes them (0002's in-order sums) still gives each build one answer in every process
            row = {"batch_exact": {b: sorted(v) for b, v in exact.items()},
                   "same_tokens": len({x["tokens"] for b in runs for x in runs[b]}) == 1,
                   "answers_per_build": {b: len({x["tokens"] for x in runs[b]}) for b in runs}}
            for key in ("decode_tps", "prefill_tps"):
                ours = [x[key] for x in runs["patched"]]
                base = [x[key] for x in runs["unpatched"]]
                # each round's ratio too: on a noisy host whole processes of either build run slow (on 2026-12-07
                # four runs of 8, 16, 24 and 24 rounds of the AVX2 kernels gave Qwen3 prefill 0.93x, 0.94x, 1.01x
                # and 0.95x); the spread of the rounds says how far their median can be trusted
                row[key] = {"patched": median(ours), "unpatched": median(base), "ratio": paired_ratio(ours, base),
                            "per_round": round_ratios(ours, base)}
            results[model] = row
            print(f"{model}: decode {row['decode_tps']['patched']:.1f} vs {row['decode_tps']['unpatched']:.1f} tok/s "
                  f"({row['decode_tps']['ratio']:.3f}x), prefill {row['prefill_tps']['patched']:.0f} vs "
                  f"{row['prefill_tps']['unpatched']:.0f} tok/s ({row['prefill_tps']['ratio']:.3f}x); "
                  f"batch_exact {row['batch_exact']}; same tokens: {row['same_tokens']}", flush=True)
    report = {"machine": machine() | {"cpu": kind}, "patch": args.patch, "kernels": args.kernels,
              "weights": args.weights, "threads": args.threads, "gen": args.gen,
              "prompt": args.prompt, "rounds": args.rounds, "models": results}
    name = result_name(args.patch)
    print(f"saved {save_by_cpu(name, report, kind)}")


def result_name(patch: str) -> str:
    """The results file of a patch's runs: patch_cost for 0002 (the one issue #47 bounds), else patch_cost_PATCH."""
    return "patch_cost" if patch == "0002" else f"patch_cost_{patch}"


def outdated(lib: Path) -> bool:
    """Whether ``lib`` is missing or older than one of our MNN patches (then it is built again)."""
    patches = (REPO / "subprojects" / "packagefiles" / "MNN").glob("*.patch")
    return not lib.is_file() or any(p.stat().st_mtime > lib.stat().st_mtime for p in patches)


def unpatched_build(leave_out: str) -> Path:
    """build/unpatched-<leave_out>/lib, libMNN as the default build without that patch, built when outdated."""
    lib = REPO / "build" / f"unpatched-{leave_out}" / "lib"
    if outdated(lib / "libMNN.so"):
        subprocess.run(["bash", str(REPO / "tools" / "mnn" / "build_unpatched.sh"), leave_out], check=True)
    return lib


def avx2_build(leave_out: str) -> Path:
    """build/avx2-kernels/<leave_out>/lib: libMNN as the default build but without AVX-512 code and without the
    patches named by ``leave_out`` ("none": all applied), built when outdated; checked to hold no AVX-512 kernel."""
    out = AVX2_KERNELS / leave_out
    lib = out / "lib" / "libMNN.so"
    if outdated(lib):
        env = dict(os.environ, MNN_EXTRA_DEFINES="-DMNN_AVX512=OFF")
        subprocess.run(["bash", str(REPO / "tools" / "mnn" / "build_unpatched.sh"), leave_out,
                        str(REPO / "build" / "ci-default"), str(out)], check=True, env=env)
    if AVX512_SYMBOL in lib.read_bytes():
        sys.exit(f"{lib} holds AVX-512 kernels: not an AVX2-only build")
    return lib.parent


if __name__ == "__main__":
    main()
