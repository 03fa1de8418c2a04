"""Patch 0002's one-row float GEMM kernels on x86, every family, whatever this CPU picks at run time.

The engine here runs the kernels its CPU selects (AVX-512 on an AVX-512 machine),
so the AVX2 and AVX2+FMA one-row forms a CPU without AVX-512 gets are never run
by the model tests on such a machine. ``tools/mnn/one_row_kernels.cpp`` compiles
MNN's kernel sources from the patched tree into a probe that runs each of them on
decode attention's shapes: the exact forms must give the 2-row tile's row bit for
bit (the batch's arithmetic), MNN 3.6.1's own one-row forms must not (else the
probe would not tell the two apart).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest
from support import REPO

sys.path.insert(0, str(REPO / "tools" / "bench"))
import one_row_kernels
from common import MNN_TREE

pytestmark = [
    pytest.mark.skipif(not (MNN_TREE / "source").is_dir(), reason="MNN sources are not unpacked in subprojects/MNN"),
    pytest.mark.skipif(shutil.which("g++") is None, reason="no C++ compiler"),
]


@pytest.mark.parametrize("family", ["avx2", "avx512"])
def test_exact_one_row_kernels_give_the_batch_rows_bits(family, tmp_path):
    if not one_row_kernels.runs_here(family):
        pytest.skip(f"this CPU cannot run the {family} kernels")
    probe = one_row_kernels.compile_probe(MNN_TREE, family, tmp_path)
    rows = [json.loads(line) for line in subprocess.run([str(probe)], capture_output=True, text=True,
                                                         check=True).stdout.splitlines()]
    shapes = {(r["l"], r["h"]) for r in rows}
    assert len(shapes) == 6
    for r in rows:
        assert r["batch_bits"] == (r["kernel"] != "inexact"), r


def test_the_modelled_loops_are_the_kernels_hot_loops(tmp_path):
    """llvm-mca is fed each kernel's innermost FMA loop: for the AVX2 exact form, the 4 pairs of 4-wide blocks
    (4 ymm FMAs, 32 products an iteration); for MNN's own one-row form, its 8 ymm FMAs over 4 l."""
    asm = one_row_kernels.compile_probe(MNN_TREE, "avx2", tmp_path, asm=True).read_text()
    exact = one_row_kernels.hot_loop(asm, "_ZL5exactPfPKfS1_PKm").splitlines()
    inexact = one_row_kernels.hot_loop(asm, "_ZL7inexactPfPKfS1_PKm").splitlines()
    assert one_row_kernels.products(exact) == 32
    assert one_row_kernels.products(inexact) == 64
    assert sum("vinsert" in x for x in exact) == 4  # two 4-wide blocks joined per ymm
