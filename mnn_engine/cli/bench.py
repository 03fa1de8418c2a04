"""``python -m mnn_engine bench``: how fast a model runs on this device.

Measures load time, warm-up time, prefill and decode tokens/s, time to first
token and peak memory over several runs (p50/p90/p99). Generation ignores end
tokens so that every run produces the asked length. ``--tune`` tries thread
counts and MNN options and saves the fastest as the model's preset, which
``Engine.load`` then uses unless told otherwise.
"""

from __future__ import annotations

import os
import resource
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, replace
from typing import Any

from ..checks import integer, invalid
from ..engine.settings import LoadOptions
from ..runtime.build import require_backend
from ..runtime.llm import Llm
from ..store.models import ModelStore

TEXT = (
    "Rivers carve valleys over millions of years, carrying sand and silt from the mountains to the sea. "
    "Along the way they feed forests, farms and cities, and every bend tells a story of floods, droughts "
    "and the slow patience of water. "
)
# A candidate tried later (more intrusive: lossy KV caches, ...) must beat the
# best so far by this factor; smaller differences are run-to-run noise.
TUNE_MARGIN = 1.03
METRICS = ("prefill_tokens_per_second", "decode_tokens_per_second", "time_to_first_token_ms")


def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (q in 0..100)."""
    ordered = sorted(values)
    if not ordered:
        return 0.0
    pos = (len(ordered) - 1) * q / 100
    low, high = int(pos), min(int(pos) + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def peak_rss_mib() -> float:
    """Peak resident memory of this process so far (Linux/Android report KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def prompt_ids(llm: Llm, length: int) -> list[int]:
    """Exactly ``length`` token ids of ordinary English text."""
    repeats = 1
    while len(ids := llm.tokenize(TEXT * repeats)) < length:
        repeats *= 2
    return ids[:length]


def bench(model: str | os.PathLike[str], options: LoadOptions, *, prompt_len: int = 128, gen: int = 128,
          runs: int = 5, store: ModelStore | None = None,
          progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Load ``model`` with ``options`` and measure; returns a JSON-ready report."""
    for name, value, low in (("prompt_len", prompt_len, 1), ("gen", gen, 2), ("runs", runs, 1)):
        integer(value, name, low=low)
    options = options.validate()
    require_backend(options.backend)
    store = store or ModelStore()
    model_id, path = store.resolve(model)
    files = store.model_dir(path)
    cache = store.prepared_cache(model_id, files)
    started = time.perf_counter()
    # every run prefills the whole prompt
    llm = Llm(files, **replace(options, prompt_cache=False).llm_arguments(cache),
              max_all_tokens=max(2048, prompt_len + gen + 8)).load()
    total_load = time.perf_counter() - started
    try:
        ids = prompt_ids(llm, prompt_len)
        samples = []
        for i in range(runs):
            result = llm.generate(ids, temperature=0, max_tokens=gen, ignore_eos=True)
            samples.append({
                "prefill_tokens_per_second": result.prefill_tokens_per_second,
                "decode_tokens_per_second": result.decode_tokens_per_second,
                "time_to_first_token_ms": result.time_to_first_token_ms,
                "completion_tokens": result.completion_tokens,
            })
            if progress:
                progress(f"run {i + 1}/{runs}: decode {result.decode_tokens_per_second:.1f} tok/s")
        stats = {
            metric: {f"p{q}": percentile([s[metric] for s in samples], q) for q in (50, 90, 99)}
            | {"mean": statistics.fmean(s[metric] for s in samples)}
            for metric in METRICS
        }
        return {
            "model": model_id or str(path),
            "options": asdict(options),
            "prompt_len": prompt_len,
            "gen": gen,
            "runs": runs,
            # what decode ran: "ngram" (drafts verified in one forward; the benchmark text repeats, so
            # drafts are often accepted and decode reads faster than an open-ended answer's) or "off"
            "speculative": llm.speculative_default,
            "load_seconds": llm.load_seconds,
            "warmup_seconds": llm.warmup_seconds,
            "total_load_seconds": total_load,
            "peak_rss_mib": peak_rss_mib(),
            "stats": stats,
            "samples": samples,
        }
    finally:
        llm.close()


def thread_candidates(base: LoadOptions, cpu_count: int) -> list[LoadOptions]:
    """Tuning, first round: thread counts up to the cores (max 8)."""
    return [replace(base, threads=t) for t in (1, 2, 3, 4, 6, 8) if t <= max(1, min(cpu_count, 8))]


def option_candidates(best: LoadOptions, exact: bool = False) -> list[LoadOptions]:
    """Tuning, second round, at the best thread count: precision, MNN's dynamic_option, mmap and
    (unless ``exact``) KV-cache quantisation, which changes outputs slightly; least intrusive first."""
    candidates = [replace(best, precision="high"), replace(best, dynamic_option=8),
                  replace(best, use_mmap=not best.use_mmap)]
    if not exact:
        candidates += [replace(best, quant_qkv=q) for q in (1, 2)]
    return [c for c in candidates if c != best]


def pick_best(table: list[dict[str, Any]]) -> dict[str, Any]:
    """The row with the fastest decode, where a later row must win by TUNE_MARGIN."""
    best = table[0]
    for row in table[1:]:
        if row["decode_p50"] > best["decode_p50"] * TUNE_MARGIN:
            best = row
    return best


def tune(model: str, base: LoadOptions, *, prompt_len: int, gen: int, runs: int, store: ModelStore | None = None,
         progress: Callable[[str], None] | None = None, exact: bool = False) -> dict[str, Any]:
    """Benchmark thread counts, then options at the best thread count, each in a fresh load; save the
    fastest decode (``pick_best``) as the model's preset. ``exact`` leaves out options that change
    outputs (KV-cache quantisation)."""
    store = store or ModelStore()
    model_id, _ = store.resolve(model)
    if model_id is None:
        raise invalid("model", "--tune needs a model in the store (import it first)")
    table: list[dict[str, Any]] = []

    def measure(candidates: list[LoadOptions]) -> dict[str, Any]:
        for options in candidates:
            if progress:
                progress(f"trying {_describe(options)}")
            report = bench(model_id, options, prompt_len=prompt_len, gen=gen, runs=runs, store=store)
            table.append({"options": asdict(options),
                          "decode_p50": report["stats"]["decode_tokens_per_second"]["p50"],
                          "prefill_p50": report["stats"]["prefill_tokens_per_second"]["p50"],
                          "load_seconds": report["load_seconds"]})
        return pick_best(table)

    best_threads = measure(thread_candidates(base, os.cpu_count() or 1))
    best = measure(option_candidates(LoadOptions(**best_threads["options"]), exact))
    path = store.save_preset(model_id, best["options"], best)
    return {"model": model_id, "table": table, "best": best, "preset": str(path)}


def _describe(options: LoadOptions) -> str:
    extra = "".join(f"  {name} {value}" for name, value in (("dynamic_option", options.dynamic_option),
                                                            ("quant_qkv", options.quant_qkv)) if value is not None)
    mmap = "  mmap" if options.use_mmap else ""
    return f"{options.backend}  threads {options.threads}  precision {options.precision}{mmap}{extra}"


def format_report(report: dict[str, Any]) -> str:
    o = report["options"]
    lines = [
        f"model {report['model']}  {_describe(LoadOptions(**o))}  prompt {report['prompt_len']}  "
        f"gen {report['gen']}  runs {report['runs']}",
        f"load {report['load_seconds']:.2f} s   warm-up {report['warmup_seconds']:.3f} s   "
        f"peak RSS {report['peak_rss_mib']:.0f} MiB",
        f"{'':<24}{'p50':>10}{'p90':>10}{'p99':>10}",
    ]
    decode = "decode tok/s" + (" (speculative)" if report["speculative"] != "off" else "")
    names = {"prefill_tokens_per_second": "prefill tok/s", "decode_tokens_per_second": decode,
             "time_to_first_token_ms": "time to first token ms"}
    for metric, label in names.items():
        s = report["stats"][metric]
        lines.append(f"{label:<24}{s['p50']:>10.1f}{s['p90']:>10.1f}{s['p99']:>10.1f}")
    return "\n".join(lines)


def format_tune(result: dict[str, Any]) -> str:
    lines = [f"{'options':<56}{'decode tok/s':>14}{'prefill tok/s':>15}{'load s':>9}"]
    for row in result["table"]:
        mark = "  <- best" if row is result["best"] else ""
        lines.append(f"{_describe(LoadOptions(**row['options'])):<56}{row['decode_p50']:>14.1f}"
                     f"{row['prefill_p50']:>15.1f}{row['load_seconds']:>9.2f}{mark}")
    if any(row["options"]["quant_qkv"] for row in result["table"]):
        lines.append("quant_qkv rows quantise the KV cache's keys: outputs differ slightly from the float cache "
                     "(docs/benchmarks.md measures how much; --exact leaves them out).")
    lines.append(f"saved preset: {result['preset']}")
    return "\n".join(lines)


def stderr_progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)

