#!/usr/bin/env python3
"""What batch-exactness costs a lone row on x86: MNN's one-row float GEMM kernels, timed and modelled.

Usage: python tools/bench/one_row_kernels.py [--mnn DIR] [--runs 5]

A decode step multiplies one query row by the KV cache (attention's float
matmuls, ``MNNPackedMatMulRemain`` with one row). MNN 3.6.1's one-row paths sum
the products in another order than its kernels for more rows; patch 0002 gives
them in-order forms (``..._1RowExact``), so a row alone gives a batch row's
bits. ``tools/mnn/one_row_kernels.cpp`` compiles the kernels from the patched
tree (DIR, default subprojects/MNN) into a probe that checks the exact forms
against the 2-row tile bit for bit and times each kernel here, on decode
attention's shapes; the same loops then go through ``llvm-mca`` with the
scheduling models of CPUs this machine is not (Intel's cores with two 512-bit
FMA ports among them): its cycles per iteration of each kernel's hot loop,
per 16 products. A model is a model: it says what the instructions cost on
that core with the data in L1, not what a decode gets there.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from common import MNN_TREE, REPO, cpu_flags, machine, median, save  # tools/bench is on sys.path

PROBE = REPO / "tools" / "mnn" / "one_row_kernels.cpp"
FLAGS = {  # kernel family -> (the probe's switch, the flags MNN compiles that family with)
    "avx512": ("-DPROBE_AVX512", ["-mavx512f", "-mavx512dq", "-mavx512vl", "-mavx512bw", "-mfma", "-DMNN_AVX512_VNNI"]),
    "avx2": ("-DPROBE_AVX2", ["-mavx2", "-mfma"]),
}
# llvm-mca scheduling models (LLVM 14 has no Zen 4 model: znver3 is the nearest AMD one, without AVX-512)
CPUS = {"avx512": ["skylake-avx512", "icelake-server"], "avx2": ["haswell", "skylake", "icelake-server", "znver3"]}
WIDTH = {"zmm": 16, "ymm": 8, "xmm": 4}  # products per FMA
NEEDS = {"avx512": "avx512bw", "avx2": "avx2"}  # the /proc/cpuinfo flag a family's probe needs to run


def runs_here(family: str) -> bool:
    """Whether this CPU can run ``family``'s probe (its llvm-mca models need no such CPU)."""
    return NEEDS[family] in cpu_flags()


def compile_probe(mnn: Path, family: str, out: Path, asm: bool = False) -> Path:
    define, flags = FLAGS[family]
    includes = [f"-I{mnn / d}" for d in ("include", "source", "schema/current", "3rd_party/flatbuffers/include",
                                         "3rd_party")]
    target = out / f"probe-{family}{'.s' if asm else ''}"
    cmd = ["g++", "-O3", "-std=gnu++11", "-w", "-DMNN_USE_SSE", "-DMNN_X86_USE_ASM", "-DMNN_LOW_MEMORY", define, *flags,
           *includes, str(PROBE), "-o", str(target)]
    if asm:
        cmd[1:1] = ["-S", "-fno-asynchronous-unwind-tables"]
    else:
        cmd += ["-ffunction-sections", "-fdata-sections", "-Wl,--gc-sections"]
    subprocess.run(cmd, check=True)
    return target


def products(loop: list[str]) -> int:
    """Products per iteration: the lanes of the loop's FMAs (the destination register's width)."""
    return sum(WIDTH[m] for x in loop if "vfmadd" in x for m in re.findall(r"%(zmm|ymm|xmm)\d+", x)[-1:])


def hot_loop(asm: str, symbol: str) -> str:
    """The hot loop of the function ``symbol``: of its innermost loops (a label and the backward jump to it),
    the one with the most FMA products per iteration, the smaller on a tie; a function without one (a wrapper
    whose kernel was not inlined) leads to the function it calls."""
    start = re.search(rf"^{re.escape(symbol)}:\s*$", asm, re.M)
    if start is None:
        raise RuntimeError(f"no function {symbol} in the probe's assembly")
    body = asm[start.end():].split("\n\t.size", 1)[0].splitlines()
    labels = {line.rstrip(":"): i for i, line in enumerate(body) if re.match(r"^\.L\w+:$", line)}
    loops = []  # (first line, backward jump's line)
    for i, line in enumerate(body):
        jump = re.match(r"^\s+j\w+\s+(\.L\w+)$", line)
        if jump and labels.get(jump.group(1), i) < i:
            loops.append((labels[jump.group(1)], i))
    best, best_key = None, None
    for first, last in loops:
        if any(first <= begin and end <= last and (begin, end) != (first, last) for begin, end in loops):
            continue  # an outer loop: its body is not one iteration's work
        loop = [x for x in body[first + 1:last + 1] if x.startswith("\t") and not x.startswith("\t.")]
        key = (products(loop), -len(loop))
        if key[0] and (best_key is None or key > best_key):
            best, best_key = loop, key
    if best is not None:
        return "\n".join(best) + "\n"
    callee = next((m.group(1) for m in map(re.compile(r"^\s+(?:jmp|call)\s+(_Z\w+)$").match, body) if m), None)
    if callee is None:
        raise RuntimeError(f"no FMA loop in {symbol}")
    return hot_loop(asm, callee)


def mca(loop: str, cpu: str, rows: int) -> float:
    """llvm-mca's cycles per iteration of ``loop`` on ``cpu``, per 16 products of one row."""
    out = subprocess.run(["llvm-mca", f"-mcpu={cpu}", "-iterations=400"], input=loop, capture_output=True,
                         text=True, check=True).stdout
    cycles = int(re.search(r"Total Cycles:\s+(\d+)", out).group(1)) / 400
    return cycles / (products(loop.splitlines()) / rows / 16)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mnn", type=Path, default=MNN_TREE, help="the patched MNN tree")
    parser.add_argument("--runs", type=int, default=5, help="probe runs (each times every kernel and shape)")
    args = parser.parse_args()
    mca_found = shutil.which("llvm-mca") is not None
    families = {}
    with tempfile.TemporaryDirectory() as tmp:
        for family in filter(runs_here, FLAGS):
            probe = compile_probe(args.mnn, family, Path(tmp))
            runs = [[json.loads(line) for line in subprocess.run([str(probe)], capture_output=True, text=True,
                                                                   check=True).stdout.splitlines()]
                    for _ in range(args.runs)]
            rows = []
            for i, first in enumerate(runs[0]):
                ns = [run[i]["ns_per_16_products"] for run in runs]
                rows.append({k: first[k] for k in ("kernel", "l", "h", "rows", "batch_bits")} |
                            {"ns_per_16_products": median(ns)})
            modelled = {}
            if mca_found:
                asm = compile_probe(args.mnn, family, Path(tmp), asm=True).read_text()
                for kernel in sorted({r["kernel"] for r in rows}):
                    loop = hot_loop(asm, f"_ZL{len(kernel)}{kernel}PfPKfS1_PKm")  # the probe's wrapper
                    n_rows = 2 if kernel == "padded" else 1
                    modelled[kernel] = {cpu: round(mca(loop, cpu, n_rows), 3) for cpu in CPUS[family]}
            families[family] = {"measured": rows, "llvm_mca_cycles_per_16_products": modelled}
            for kernel in dict.fromkeys(r["kernel"] for r in rows):
                here = [r["ns_per_16_products"] for r in rows if r["kernel"] == kernel]
                print(f"{family} {kernel}: {median(here):.3f} ns per 16 products here (median of shapes); "
                      f"llvm-mca cycles {modelled.get(kernel, {})}", flush=True)
    bad = [(f, r) for f, v in families.items() for r in v["measured"]
           if r["kernel"] != "inexact" and not r["batch_bits"]]
    if bad:
        raise SystemExit(f"a kernel that should give a batch row's bits does not: {bad}")
    version = subprocess.run(["llvm-mca", "--version"], capture_output=True, text=True).stdout if mca_found else ""
    report = {"machine": machine(), "llvm_mca": " ".join(version.split()[:4]) or None, "families": families}
    print(f"saved {save('one_row_kernels', report)}")


if __name__ == "__main__":
    main()
