#!/usr/bin/env python3
"""Resident memory of one generation, as the emulated aarch64 process holds it.

Run inside the arm64 root under qemu-user (tools/arm/memory.sh):
    memory_guest.py MODEL_DIR [--prompt-tokens 181] [--gen 256] [--interval 0.05] [KEY=VALUE ...]

Under qemu-user the guest's addresses are the host's (guest_base 0), so the
pages the guest holds are the host process's pages inside the guest's
mappings. qemu answers /proc/self/maps with the guest's mappings only, and
passes /proc/PID/task/PID/smaps (a path it does not emulate) to the kernel,
which gives every mapping's real Rss. A thread samples both every
``--interval`` seconds; the guest's resident set is the Rss of the host
mappings inside guest mappings, and what is left (qemu's binary, heap,
translation cache and its threads' arenas) is qemu's. Peaks are per phase:
load, prefill (the first token), decode, after the answer (stable) and after
the C allocator has been asked to give back what it no longer uses (trimmed).
Prints one JSON object.
"""

from __future__ import annotations

import argparse
import bisect
import json
import os
import re
import sys
import threading
import time

_MAP = re.compile(r"^([0-9a-f]+)-([0-9a-f]+) \S+ \S+ \S+ \S+\s*(.*)$")


def guest_ranges() -> tuple[list[int], list[int], list[str]]:
    """The guest's mappings (qemu's emulated /proc/self/maps), sorted by start."""
    starts, ends, names = [], [], []
    with open("/proc/self/maps") as f:
        for line in f:
            m = _MAP.match(line)
            if m:
                starts.append(int(m.group(1), 16))
                ends.append(int(m.group(2), 16))
                names.append(m.group(3).strip())
    return starts, ends, names


def category(name: str) -> str:
    """What a guest mapping holds, by its name."""
    if not name or name.startswith("["):
        return "anonymous"  # MNN's buffers, the KV cache, Python's and the C heaps, stacks
    base = os.path.basename(name)
    if base.endswith(".so") or ".so." in base or base.startswith("python3"):
        return "code"
    return "files"  # the mapped weights (MNN's mmap cache of the prepared model), the tokenizer, locale


def sample(host_smaps: str) -> dict[str, int]:
    """kB resident now: the guest's by category, and qemu's own. A host
    mapping's Rss is shared out over the guest mappings it covers by length
    (the kernel merges neighbouring guest mappings of the same kind)."""
    starts, ends, names = guest_ranges()
    out = {"anonymous": 0, "code": 0, "files": 0, "qemu": 0}
    lo = hi = 0
    with open(host_smaps) as f:
        for line in f:
            m = _MAP.match(line)
            if m:
                lo, hi = int(m.group(1), 16), int(m.group(2), 16)
                continue
            if not line.startswith("Rss:") or hi <= lo:
                continue
            rss = int(line.split()[1])
            given = 0
            j = max(bisect.bisect_right(starts, lo) - 1, 0)
            while j < len(starts) and starts[j] < hi:
                covered = min(hi, ends[j]) - max(lo, starts[j])
                if covered > 0:
                    share = rss * covered // (hi - lo)
                    out[category(names[j])] += share
                    given += share
                j += 1
            out["qemu"] += rss - given
    return out


class Sampler(threading.Thread):
    """Samples until stopped; keeps the peak of each phase."""

    def __init__(self, interval: float) -> None:
        super().__init__(daemon=True)
        pid = os.getpid()
        self.path = f"/proc/{pid}/task/{pid}/smaps"  # not emulated by qemu: the host's real Rss
        self.interval = interval
        self.phase = "start"
        self.peaks: dict[str, dict[str, int]] = {}
        self.samples = 0
        self._done = threading.Event()
        self._lock = threading.Lock()  # the sampling thread and enter()/stop() both take samples

    def take(self) -> None:
        with self._lock:
            now = sample(self.path)
            now["guest"] = now["anonymous"] + now["code"] + now["files"]
            peak = self.peaks.setdefault(self.phase, dict(now))
            if now["guest"] > peak["guest"]:
                peak.update(now)
            self.samples += 1

    def run(self) -> None:
        while not self._done.wait(self.interval):
            self.take()

    def enter(self, phase: str) -> None:
        self.take()  # the end of the phase before
        with self._lock:
            self.phase = phase
        self.take()

    def stop(self) -> None:
        self._done.set()
        self.join()
        self.take()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model")
    ap.add_argument("--prompt-tokens", type=int, default=181)
    ap.add_argument("--gen", type=int, default=256)
    ap.add_argument("--interval", type=float, default=0.05)
    ap.add_argument("config", nargs="*", help="MNN config overrides, KEY=JSON")
    args = ap.parse_args()
    overrides = {k: json.loads(v) for k, v in (c.split("=", 1) for c in args.config)}

    sampler = Sampler(args.interval)
    sampler.start()
    sampler.enter("load")
    from mnn_engine import Llm

    t0 = time.monotonic()
    llm = Llm(args.model, **overrides).load()
    load_s = time.monotonic() - t0
    text = "Once upon a time, in a small village by a wide river, there lived a girl who loved boats. "
    ids = llm.tokenize(text * (args.prompt_tokens // 8 + 2))[: args.prompt_tokens]
    sampler.enter("prefill")
    first = None
    count = 0
    t1 = time.monotonic()
    for _piece in llm.stream(ids, max_tokens=args.gen, ignore_eos=True, temperature=0):
        count += 1
        if first is None:
            first = time.monotonic() - t1
            sampler.enter("decode")
    gen_s = time.monotonic() - t1
    sampler.enter("stable")
    time.sleep(max(args.interval * 4, 0.2))
    # what the C allocator holds but no longer uses (replaced KV buffers among it) given back: what is left
    # is what the model and its cache hold
    from mnn_engine.runtime.memory import give_back_memory

    give_back_memory()
    sampler.enter("trimmed")
    time.sleep(max(args.interval * 4, 0.2))
    sampler.stop()
    print(json.dumps({
        "model": os.path.basename(os.path.normpath(args.model)), "config": overrides,
        "prompt_tokens": len(ids), "pieces": count, "load_s": round(load_s, 1),
        "first_token_s": round(first or 0.0, 1), "generate_s": round(gen_s, 1),
        "samples": sampler.samples, "batch_exact": llm.batch_exact,
        "peak_kib": sampler.peaks,
        "python": sys.version.split()[0],
    }, indent=1))
    llm.close()


if __name__ == "__main__":
    main()
