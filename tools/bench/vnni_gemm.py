#!/usr/bin/env python3
"""Patch 0004 on the AVX-512 VNNI int8 GEMMs: the same bits as MNN 3.6.1's kernels, and the time it saves.

Usage: python tools/bench/vnni_gemm.py [--mnn DIR] [--rounds 5]

GCC compiles MNN's ``_mm512_dpbusds_epi32`` loops with two register copies per
product instruction; patch 0004 issues the same instruction with its accumulator
in place in the int4 kernel (``w4``). ``tools/mnn/vnni_gemm.cpp`` is compiled
twice, against MNN as released (the vendored tarball, ``$MNN_TARBALL``) and
against the patched tree (DIR, default subprojects/MNN): both builds must write
the same bytes for every kernel, row count and quantisation mode, then they are
timed alternately on Qwen3-0.6B's projection shapes, 4 rows (a prefill tile) and
1 (a decode step). The int8 kernel, whose code the patch leaves as it is, is the
control: its ratio is what the two builds' code layout alone does.
Without AVX-512 VNNI it says so and saves nothing (run_all goes on).
"""

from __future__ import annotations

import argparse
import subprocess
import tempfile
from pathlib import Path

from common import (  # tools/bench is on sys.path
    MNN_TREE,
    REPO,
    cpu_flags,
    machine,
    median,
    mnn_includes,
    require_same_bits,
    save,
    unpack_mnn_release,
)

PROBE = REPO / "tools" / "mnn" / "vnni_gemm.cpp"
# MNN compiles GemmInt8_VNNI.cpp with these (source/backend/cpu/x86_x64/CMakeLists.txt, MNNAVX512_VNNI)
FLAGS = ["-mavx512f", "-mavx512dq", "-mavx512vl", "-mavx512bw", "-mfma", "-mavx512vnni", "-DMNN_USE_SSE",
         "-DMNN_AVX512_VNNI", "-DMNN_LOW_MEMORY"]
# (kernel, rows, input bias, int8 output) over 3 blocks of 16 input groups and 11 output groups (a remainder
# tile): every path of both kernels the LLM runs, and the int8-output one
CASES = [(kernel, rows, bias, out) for kernel in ("w4", "int8") for rows in (1, 2, 3, 4) for bias in (0, 1)
         for out in ((0, 1) if kernel == "int8" else (0,))]
# Qwen3-0.6B's projections in blocks of 64 inputs: (name, groups of 4 inputs per block, blocks, groups of 16 outputs)
SHAPES = [("1024 -> 3072 (gate, up)", 16, 16, 192), ("3072 -> 1024 (down)", 16, 48, 64)]


def runs_here() -> bool:
    """Whether this CPU has AVX-512 VNNI (the probe runs MNN's kernels for it)."""
    flags = cpu_flags()
    return "avx512_vnni" in flags and "avx512bw" in flags


def compile_probe(mnn: Path, out: Path) -> Path:
    subprocess.run(["g++", "-O3", "-std=gnu++11", "-w", *FLAGS, *mnn_includes(mnn), str(PROBE), "-o", str(out)],
                   check=True)
    return out


def run(probe: Path, kernel: str, rows: int, groups: int, blocks: int, outputs: int, bias: int = 1, out: int = 0,
        reps: int = 0) -> tuple[str, float]:
    """The probe's hash of what the kernel wrote, and its ns per call over ``reps`` calls (0: not timed)."""
    args = [kernel, rows, groups, blocks, outputs, bias, out, reps]
    digest, ns = subprocess.run([str(probe), *map(str, args)], capture_output=True, text=True,
                                check=True).stdout.split()
    return digest, float(ns)


def same_bits(released: Path, patched: Path) -> list[dict]:
    """Each case's hash from both builds."""
    rows = []
    for kernel, n, bias, out in CASES:
        a, b = (run(p, kernel, n, 16, 3, 11, bias, out)[0] for p in (released, patched))
        rows.append({"kernel": kernel, "rows": n, "input_bias": bias, "int8_out": out, "released": a,
                     "patched": b})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mnn", type=Path, default=MNN_TREE, help="the patched MNN tree")
    parser.add_argument("--rounds", type=int, default=5, help="alternating timed rounds per shape")
    args = parser.parse_args()
    if not runs_here():
        print("this CPU has no AVX-512 VNNI: the kernels cannot run here (nothing measured)")
        return
    with tempfile.TemporaryDirectory() as tmp:
        released = compile_probe(unpack_mnn_release(Path(tmp) / "mnn"), Path(tmp) / "released")
        patched = compile_probe(args.mnn, Path(tmp) / "patched")
        bits = same_bits(released, patched)
        require_same_bits(bits, "patch 0004")
        probes = {"released": released, "patched": patched}
        timed = []
        for kernel in ("w4", "int8"):
            for name, groups, blocks, outputs in SHAPES:
                for n in (4, 1):
                    ns: dict[str, list[float]] = {build: [] for build in probes}
                    for i in range(args.rounds):
                        for build in sorted(probes, reverse=i % 2 == 1):  # alternating which runs first
                            ns[build].append(run(probes[build], kernel, n, groups, blocks, outputs, reps=200)[1])
                    row = {"kernel": kernel, "shape": name, "rows": n, "released_ns": median(ns["released"]),
                           "patched_ns": median(ns["patched"]),
                           "speedup": median([a / b for a, b in zip(ns["released"], ns["patched"], strict=True)])}
                    timed.append(row)
                    print(f"{kernel} {name}, {n} row(s): released {row['released_ns'] / 1000:.1f} us, patched "
                          f"{row['patched_ns'] / 1000:.1f} us: {row['speedup']:.2f}x", flush=True)
    gcc = subprocess.run(["g++", "--version"], capture_output=True, text=True).stdout.splitlines()[0]
    print(f"saved {save('vnni_gemm', {'machine': machine(), 'compiler': gcc, 'cases': bits, 'timed': timed})}")


if __name__ == "__main__":
    main()
