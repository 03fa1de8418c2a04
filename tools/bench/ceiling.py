#!/usr/bin/env python3
"""The memory-bandwidth ceiling of decoding on this machine.

Usage: python tools/bench/ceiling.py [--gib 1] [--repeats 5]

Decoding one token reads every weight once, so tokens/s can never beat read
bandwidth / weight bytes. Read bandwidth is measured as the best of several
sums over a large buffer, with 1 thread and with one thread per core (numpy
releases the GIL in its reductions). One thread per core is measured again
for each placement of the VM's cores seen (sharing a cache or not, by
common.core_handoff_ns): where cores sharing a cache were seen, the ceiling
is theirs (on the project's EPYC VMs the lower figure and the usual case),
the other kept beside it. The ceiling is given for each test model's weight
file and, where peers.py has made them, for the GGUF files llama.cpp decodes
the same shapes from (their tensors' bytes, read by the gguf-py of the
llama.cpp peers.py builds): where both engines decode near their ceilings,
no kernel makes one faster than the ratio of the bytes they read. One run
per kind of CPU is kept (bandwidth is the machine's).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
from common import (  # tools/bench is on sys.path
    agreed_placement,
    by_threads,
    core_handoff_ns,
    cpu_kind,
    machine,
    save_by_cpu,
    test_model,
)
from peers import GGUF, llama_source

MODELS = ("qwen3-0.6b-shape", "smollm2-135m")


def read_bandwidth(buffer: np.ndarray, threads: int, repeats: int) -> float:
    """Bytes per second, best of ``repeats`` full reads."""
    parts = np.array_split(buffer, threads)
    best = float("inf")
    with ThreadPoolExecutor(threads) as pool:
        for _ in range(repeats):
            start = time.perf_counter()
            list(pool.map(np.sum, parts))
            best = min(best, time.perf_counter() - start)
    return buffer.nbytes / best


def bandwidth_by_cores(buffer: np.ndarray, threads: int, rounds: int) -> dict[str, float]:
    """Best read bandwidth (bytes per second) on ``threads`` threads for each placement of the VM's cores
    seen (``near``: sharing a cache, ``far``), over ``rounds`` rounds of two reads: the host moves vCPUs,
    and on the project's EPYC VMs two cores on different CCDs read about half again as fast as two
    sharing one. A round counts only where the cache-line hand-off says the same before and after."""
    best: dict[str, float] = {}
    for _ in range(rounds):
        before = core_handoff_ns()
        bandwidth = read_bandwidth(buffer, threads, 2)
        where = agreed_placement([before, core_handoff_ns()])
        if where in ("near", "far"):
            best[where] = max(best.get(where, 0.0), bandwidth)
    return best


def gguf_tensor_bytes(path: Path) -> int:
    """The bytes of a GGUF file's tensors (what a forward reads, the tied output included; not the
    tokenizer and other metadata)."""
    gguf_py = str(llama_source() / "gguf-py")
    if gguf_py not in sys.path:
        sys.path.insert(0, gguf_py)
    from gguf import GGUFReader

    return sum(int(tensor.n_bytes) for tensor in GGUFReader(path).tensors)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gib", type=float, default=1.0)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    buffer = np.ones(int(args.gib * (1 << 30)) // 8, dtype=np.int64)
    cores = os.cpu_count() or 1
    bandwidth = {t: read_bandwidth(buffer, t, args.repeats) for t in sorted({1, cores})}
    by_cores = bandwidth_by_cores(buffer, cores, args.repeats) if cores > 1 else {}
    if "near" in by_cores:  # the ceiling of the common placement; the far one is kept beside it
        bandwidth[cores] = by_cores["near"]
    del buffer
    models = {}
    for name in MODELS:
        weight = test_model(name) / "llm.mnn.weight"
        size = weight.stat().st_size
        models[name] = {"weight_bytes": size,
                        "ceiling_tps": {str(t): bw / size for t, bw in bandwidth.items()}}
        engine, gguf = GGUF[name]
        if gguf.exists():
            peer = gguf_tensor_bytes(gguf)
            models[name]["peer"] = {"engine": engine, "file": gguf.name, "weight_bytes": peer,
                                    "ceiling_tps": {str(t): bw / peer for t, bw in bandwidth.items()}}
    result = {"machine": machine(), "read_gb_per_s": {str(t): bw / 1e9 for t, bw in bandwidth.items()},
              "read_gb_per_s_by_cores": {where: bw / 1e9 for where, bw in by_cores.items()}, "models": models}
    for t, bw in bandwidth.items():
        print(f"read bandwidth, {t} thread(s): {bw / 1e9:.1f} GB/s")
    for where, bw in by_cores.items():
        print(f"  {cores} threads on {where} cores: {bw / 1e9:.1f} GB/s")
    for name, info in models.items():
        print(f"{name}: weights {info['weight_bytes'] / 1e6:.0f} MB -> decode ceiling "
              f"{by_threads(info['ceiling_tps'])}")
        if "peer" in info:
            peer = info["peer"]
            print(f"  {peer['engine']}'s {peer['file']}: tensors {peer['weight_bytes'] / 1e6:.0f} MB -> "
                  f"{by_threads(peer['ceiling_tps'])}")
    print(f"saved {save_by_cpu('ceiling', result, cpu_kind(result['machine']))}")


if __name__ == "__main__":
    main()
