#!/usr/bin/env python3
"""Patch 0005 on MNN's int8 GEMM input sums: the same bits as MNN 3.6.1's C form, and the time it saves.

Usage: python tools/bench/sum_by_axis.py [--mnn DIR] [--rounds 5]

MNN's int8 GEMMs subtract the weights' zero points with the sums of each
quantised input row per block (``MNNSumByAxisLForMatmul_A``). x86 has no
vector form of it: MNN's C form adds one byte at a time, about 5 % of int4
prefill on the Qwen3-0.6B shape (a ``perf`` profile, 2 threads). Patch 0005
adds an AVX2 form beside MNN's x86 reorder functions. ``tools/mnn/sum_by_axis.cpp``
links MNN's C form compiled from the release (the vendored tarball) with the
AVX2 form from the patched tree (DIR, default subprojects/MNN), installed as
MNN installs it; both must write the same bytes for every tile size, partial
last group, scale mode and kernel size, then both are timed in each of several runs
on Qwen3-0.6B's projection inputs: a 128-token prefill and a decode step.
Without AVX2 it says so and saves nothing.
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

PROBE = REPO / "tools" / "mnn" / "sum_by_axis.cpp"
# MNN's flags: the C form is in its baseline objects, the AVX2 form in MNNAVX (-mavx2, with MNNAVXFMA's -mfma)
COMMON = ["-O3", "-std=gnu++11", "-w", "-ffunction-sections", "-fdata-sections", "-DMNN_USE_SSE", "-DMNN_LOW_MEMORY"]
AVX2 = ["-mavx2", "-mfma"]
# (rows, blocks, groups of 4 inputs over all blocks, kernel positions, bytes of the last group, one scale, a scale
# per row and block): 0-9 rows (none, whole tiles of 4 and the 1-3 row remainders), partial last groups, each scale
# mode, two kernel positions, and group counts that leave a tail after the 32-byte loop
CASES = [(rows, blocks, lu, kxy, valid, one, block)
         for rows in (0, 1, 2, 3, 4, 5, 7, 9) for (blocks, lu) in ((1, 5), (3, 12), (16, 256))
         for kxy in (1, 2) for valid in (0, 1, 3) for (one, block) in ((0, 0), (1, 0), (0, 1))]
# Qwen3-0.6B's projection inputs in blocks of 64 (16 groups of 4 each): (name, blocks, groups)
SHAPES = [("1024 inputs (q, k, v, gate, up)", 16, 256), ("3072 inputs (down)", 48, 768)]


def runs_here() -> bool:
    """Whether this CPU has AVX2 (the probe runs patch 0005's form)."""
    return "avx2" in cpu_flags()


def compile_probe(released: Path, patched: Path, out: Path) -> Path:
    """The probe: MNN's C form from ``released``, the AVX2 form from ``patched``, in one program."""
    objects = []
    for name, tree, flags in (("reference", released, ["-DSUM_BY_AXIS_REFERENCE"]), ("patched", patched, AVX2)):
        obj = out.with_name(f"{out.name}-{name}.o")
        subprocess.run(["g++", *COMMON, *flags, *mnn_includes(tree), "-c", str(PROBE), "-o", str(obj)], check=True)
        objects.append(str(obj))
    # the included MNN files define more than the probe calls: drop what nothing reaches (and its references)
    subprocess.run(["g++", *objects, "-Wl,--gc-sections", "-o", str(out)], check=True)
    return out


def run(probe: Path, case: tuple[int, ...], reps: int = 0) -> tuple[str, str, float, float]:
    """The two forms' hashes of what they wrote, and their ns per call over ``reps`` calls (0: not timed)."""
    reference, patched, ns_reference, ns_patched = subprocess.run(
        [str(probe), *map(str, case), str(reps)], capture_output=True, text=True, check=True).stdout.split()
    return reference, patched, float(ns_reference), float(ns_patched)


def same_bits(probe: Path) -> list[dict]:
    """Each case's hash from both forms."""
    rows = []
    for case in CASES:
        reference, patched, _, _ = run(probe, case)
        rows.append(dict(zip(("rows", "blocks", "lu", "kernelxy", "valid", "one_scale", "input_block"), case,
                             strict=True)) | {"released": reference, "patched": patched})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mnn", type=Path, default=MNN_TREE, help="the patched MNN tree")
    parser.add_argument("--rounds", type=int, default=5, help="timed runs per shape")
    args = parser.parse_args()
    if not runs_here():
        print("this CPU has no AVX2: patch 0005's form cannot run here (nothing measured)")
        return
    with tempfile.TemporaryDirectory() as tmp:
        probe = compile_probe(unpack_mnn_release(Path(tmp) / "mnn"), args.mnn, Path(tmp) / "probe")
        bits = same_bits(probe)
        require_same_bits(bits, "patch 0005")
        timed = []
        for name, blocks, lu in SHAPES:
            for rows in (128, 1):
                runs = [run(probe, (rows, blocks, lu, 1, 0, 0, 0), reps=20000 // rows) for _ in range(args.rounds)]
                row = {"shape": name, "rows": rows, "released_ns": median([r[2] for r in runs]),
                       "patched_ns": median([r[3] for r in runs]),
                       "speedup": median([r[2] / r[3] for r in runs])}
                timed.append(row)
                print(f"{name}, {rows} row(s): C form {row['released_ns'] / 1000:.2f} us, patch 0005 "
                      f"{row['patched_ns'] / 1000:.2f} us: {row['speedup']:.1f}x", flush=True)
    gcc = subprocess.run(["g++", "--version"], capture_output=True, text=True).stdout.splitlines()[0]
    print(f"saved {save('sum_by_axis', {'machine': machine(), 'compiler': gcc, 'cases': bits, 'timed': timed})}")


if __name__ == "__main__":
    main()
