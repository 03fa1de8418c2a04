"""Patch 0004 changes how GCC compiles MNN's AVX-512 VNNI int4 GEMM, not what it computes.

``tools/mnn/vnni_gemm.cpp`` runs MNN's two VNNI int8 GEMM kernels (int4 and
int8 weights) on the same deterministic inputs, compiled from MNN 3.6.1 as
released (the vendored tarball) and from our patched tree: every row count of
a tile (1-4), with and without the input bias of MNN's asymmetric input
quantisation, float and int8 output, over several blocks and a remainder tile,
must write the same bytes. The model tests run whatever kernel this CPU picks;
this runs these two wherever the CPU has AVX-512 VNNI.
"""

from __future__ import annotations

import shutil
import sys

import pytest
from support import REPO

sys.path.insert(0, str(REPO / "tools" / "bench"))
import vnni_gemm
from common import MNN_TARBALL, MNN_TREE, unpack_mnn_release

pytestmark = [
    pytest.mark.skipif(not (MNN_TREE / "source").is_dir(), reason="MNN sources are not unpacked in subprojects/MNN"),
    pytest.mark.skipif(not MNN_TARBALL.is_file(), reason=f"no MNN tarball at {MNN_TARBALL}"),
    pytest.mark.skipif(shutil.which("g++") is None, reason="no C++ compiler"),
    pytest.mark.skipif(not vnni_gemm.runs_here(), reason="this CPU has no AVX-512 VNNI"),
]


def test_patched_vnni_kernels_write_the_released_kernels_bytes(tmp_path):
    released = vnni_gemm.compile_probe(unpack_mnn_release(tmp_path / "mnn"), tmp_path / "released")
    patched = vnni_gemm.compile_probe(MNN_TREE, tmp_path / "patched")
    rows = vnni_gemm.same_bits(released, patched)
    assert len(rows) == len(vnni_gemm.CASES) == 24
    assert all(r["released"] == r["patched"] for r in rows), [r for r in rows if r["released"] != r["patched"]]
    # the probe tells cases apart (a constant hash would pass the comparison above)
    assert len({r["patched"] for r in rows}) > 16


def test_the_probe_compiles_the_patched_kernel(tmp_path):
    """The patched tree's int4 kernel is the inline-asm form: the probe times patch 0004, not a copy of MNN."""
    source = (MNN_TREE / "source/backend/cpu/x86_x64/avx512/GemmInt8_VNNI.cpp").read_text()
    assert "mnn_dpbusds_in_place" in source
    released = unpack_mnn_release(tmp_path / "mnn") / "source/backend/cpu/x86_x64/avx512/GemmInt8_VNNI.cpp"
    assert "mnn_dpbusds_in_place" not in released.read_text()
