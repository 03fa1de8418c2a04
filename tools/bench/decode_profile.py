#!/usr/bin/env python3
"""Where decode time goes: a `perf` profile of MNN decoding the Qwen3-0.6B shape.

Usage: python tools/bench/decode_profile.py [--threads 1 2] [--gen 256]

Each configuration runs in a fresh process under ``perf record`` (sampling
at 999 Hz): a warm load (the weights cache is written by an unprofiled run
first), a 16-token prompt, then ``--gen`` greedy tokens of plain decode
(speculation off: its batched verification is another workload), so decode
dominates the samples. Samples are grouped by symbol into the kernel families
below; the share of each family is what the report shows, with the calling
thread's milliseconds per token in each (where a second thread helps, which
part shrank and what waiting for it costs). Needs Linux
``perf`` (Debian: ``apt install linux-perf``); without it the script says so
and saves nothing.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

from common import machine, save, test_model  # tools/bench is on sys.path

WORKER = """
import json, sys
from pathlib import Path
from mnn_engine import Llm, LoadOptions
from mnn_engine.cli.bench import prompt_ids
from mnn_engine.store.models import prepare_cache
path, threads, gen, cache, extra = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), Path(sys.argv[4]), sys.argv[5]
prepare_cache(cache, Path(path))
options = LoadOptions(threads=threads, prompt_cache=False, speculative="off", **json.loads(extra))
llm = Llm(path, **options.llm_arguments(cache)).load()
ids = prompt_ids(llm, 16)
result = llm.generate(ids, temperature=0, max_tokens=gen, ignore_eos=True)
print(json.dumps({"decode_tps": result.decode_tokens_per_second}))
"""

# (family, pattern on the symbol name); the first match wins.
FAMILIES = (
    ("int4 weight matmuls (MNN int8 GEMM kernels)", re.compile(r"GemmInt8|DenseConvInt8|DynamicUpdateConvBiasScale|"
                                                              r"Float2Int8|SumByAxisLForMatmul|PackC4ForMatMul_A")),
    ("attention (float matmul, softmax, KV cache)", re.compile(r"PackedMatMul|CPUAttention|KVCache|ExpC8|"
                                                              r"QuantAttention|Softmax")),
    ("thread pool hand-offs (scheduler, sched_yield)", re.compile(r"schedule|sched_yield|ThreadPool|futex|"
                                                                 r"syscall|switch_to|_raw_spin")),
    ("our loop (Cython sampler, callbacks)", re.compile(r"__pyx_|_mnn\b")),
)
OTHER = "other (norms, element-wise ops, Python, kernel)"
LINE = re.compile(r"^\s*([\d.]+)%\s+\[[.k]\]\s+(.+?)(?:\s{2,}.*)?$")  # perf pads with more columns
SAMPLE = re.compile(r"^\s*(\d+)/(\d+)\s+[0-9a-f]+\s+(.+)$")  # perf script -F pid,tid,ip,sym
CONFIGS = {"default": {}, "kv-int8": {"quant_qkv": 1}}


def group(report: str) -> dict[str, float]:
    """Shares (percent) per family from ``perf report --sort symbol --stdio`` output."""
    shares = {name: 0.0 for name, _ in FAMILIES} | {OTHER: 0.0}
    for line in report.splitlines():
        match = LINE.match(line)
        if not match:
            continue
        percent, symbol = float(match.group(1)), match.group(2)
        shares[family_of(symbol)] += percent
    return shares


def family_of(symbol: str) -> str:
    """The kernel family a symbol belongs to (the first pattern that matches)."""
    return next((name for name, pattern in FAMILIES if pattern.search(symbol)), OTHER)


def calling_thread_ms(script: str, decode_tps: float) -> dict[str, float]:
    """Milliseconds per decoded token the calling thread spent in each family, from ``perf script -F
    pid,tid,ip,sym`` output: its samples' shares times the decode's time per token. The calling thread
    runs ``generate`` (MNN's pool threads help it): the main thread (tid = pid) of the process with the
    most samples, since perf also records the processes it starts (in an editable install, the ninja its
    import runs). That thread is never idle, so its samples cover the wall time; where a second thread makes
    decode faster, these say which part shrank and what the hand-offs (its waits for the pool) cost."""
    samples = [m.groups() for m in map(SAMPLE.match, script.splitlines()) if m]
    busiest = Counter(pid for pid, _, _ in samples).most_common(1)
    decoding = busiest[0][0] if busiest else None
    counts = {name: 0 for name, _ in FAMILIES} | {OTHER: 0}
    for pid, tid, symbol in samples:
        if pid == tid == decoding:
            counts[family_of(symbol)] += 1
    total = sum(counts.values()) or 1
    return {name: 1000.0 / decode_tps * n / total for name, n in counts.items()}


def profile(model: Path, threads: int, gen: int, extra: dict, cache: Path) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "perf.data"
        out = subprocess.run(["perf", "record", "-q", "-F", "999", "-o", str(data), "--", sys.executable, "-c",
                              WORKER, str(model), str(threads), str(gen), str(cache), json.dumps(extra)],
                             check=True, capture_output=True, text=True, cwd="/").stdout
        report = subprocess.run(["perf", "report", "-i", str(data), "--no-children", "--sort", "symbol", "--stdio",
                                 "--percent-limit", "0.05"], check=True, capture_output=True, text=True).stdout
        script = subprocess.run(["perf", "script", "-i", str(data), "-F", "pid,tid,ip,sym"], check=True,
                                capture_output=True, text=True).stdout
    top = [m.groups() for m in map(LINE.match, report.splitlines()) if m][:8]
    decode_tps = json.loads(out.strip().splitlines()[-1])["decode_tps"]
    return {"threads": threads, "options": extra, "decode_tps": decode_tps, "shares": group(report),
            "calling_thread_ms": calling_thread_ms(script, decode_tps),
            "top_symbols": [{"percent": float(p), "symbol": s} for p, s in top]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--gen", type=int, default=256)
    args = parser.parse_args()
    if shutil.which("perf") is None:
        print("perf is not installed (Debian: apt install linux-perf); nothing measured", file=sys.stderr)
        return
    model = test_model("qwen3-0.6b-shape")
    runs = []
    with tempfile.TemporaryDirectory() as cache:
        # unprofiled: writes MNN's prepared-weights cache, so the profiled loads are warm
        subprocess.run([sys.executable, "-c", WORKER, str(model), "1", "4", cache, "{}"], check=True,
                       capture_output=True, cwd="/")
        for threads in args.threads:
            for name, extra in CONFIGS.items():
                run = profile(model, threads, args.gen, extra, Path(cache))
                run["config"] = name
                runs.append(run)
                shares = "  ".join(f"{family.split(' (')[0]} {share:.1f}%" for family, share in run["shares"].items())
                print(f"{threads} thr {name:<8} decode {run['decode_tps']:.1f} tok/s  {shares}", flush=True)
    print(f"saved {save('profile', {'machine': machine(), 'model': str(model), 'gen': args.gen, 'runs': runs})}")


if __name__ == "__main__":
    main()
