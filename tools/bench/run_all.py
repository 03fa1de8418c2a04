#!/usr/bin/env python3
"""Run the whole benchmark suite, one benchmark after another, then write
docs/benchmarks.md. Usage: python tools/bench/run_all.py [--skip-peers]"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
SUITE = ["engine.py", "http_stream.py", "memory.py", "ceiling.py", "peers.py", "load.py", "switching.py",
         "vision.py", "kv_quality.py",
         "decode_profile.py", "conversation.py", "cache_exactness.py", "threads.py",
         "structured.py", "speculative.py", "patch_cost.py", "switch_cost.py", ("patch_cost.py", "--patch", "0005"),
         ("patch_cost.py", "--patch", "0007"), ("patch_cost.py", "--patch", "0008"),
         ("patch_cost.py", "--patch", "0008", "--weights", "mapped"),
         ("patch_cost.py", "--patch", "0009", "--weights", "mapped"),
         ("patch_cost.py", "--patch", "0009", "--weights", "mapped", "--gen", "1024"),
         ("patch_cost.py", "--patch", "0010", "--weights", "mapped"),
         ("patch_cost.py", "--patch", "0010", "--weights", "mapped", "--gen", "1024"),
         ("patch_cost.py", "--patch", "0011", "--weights", "mapped"),
         ("patch_cost.py", "--patch", "0012", "--weights", "mapped"),
         ("patch_cost.py", "--patch", "0012", "--weights", "mapped", "--threads", "1"),
         ("patch_cost.py", "--patch", "0013", "--weights", "mapped"),
         ("patch_cost.py", "--patch", "0013", "--weights", "mapped", "--threads", "1"),
         "one_row_kernels.py", "vnni_gemm.py", "sum_by_axis.py", "x86_kernels.py", "kv_growth.py",
         "prefill_chunk.py"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--skip-peers", action="store_true",
                        help="skip the benchmarks that need llama.cpp (its first build takes ~6 min)")
    args = parser.parse_args()
    for entry in SUITE:
        script, *options = (entry,) if isinstance(entry, str) else entry
        if args.skip_peers and script in ("peers.py", "load.py"):
            continue
        print(f"== {' '.join((script, *options))}", flush=True)
        subprocess.run([sys.executable, str(HERE / script), *options], check=True)
    subprocess.run([sys.executable, str(HERE / "report.py")], check=True)


if __name__ == "__main__":
    main()
