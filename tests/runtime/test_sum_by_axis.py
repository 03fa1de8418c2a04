"""Patch 0005 computes MNN's int8 GEMM input sums with AVX2, and the same bits as MNN's C form.

``tools/mnn/sum_by_axis.cpp`` links ``MNNSumByAxisLForMatmul_A`` as MNN 3.6.1
released it (compiled from the vendored tarball) with the patched tree's AVX2
form, installed the way MNN installs it (``_AVX_ReorderInit`` over a table
holding the C form): every tile size (0-4 rows and remainders), partial last
group, scale mode and kernel size must give the same bytes. The model tests run
whichever form this CPU picks; this runs both wherever the CPU has AVX2.
"""

from __future__ import annotations

import shutil
import sys

import pytest
from support import REPO

sys.path.insert(0, str(REPO / "tools" / "bench"))
import sum_by_axis
from common import MNN_TARBALL, MNN_TREE, unpack_mnn_release

pytestmark = [
    pytest.mark.skipif(not (MNN_TREE / "source").is_dir(), reason="MNN sources are not unpacked in subprojects/MNN"),
    pytest.mark.skipif(not MNN_TARBALL.is_file(), reason=f"no MNN tarball at {MNN_TARBALL}"),
    pytest.mark.skipif(shutil.which("g++") is None, reason="no C++ compiler"),
    pytest.mark.skipif(not sum_by_axis.runs_here(), reason="this CPU has no AVX2"),
]


def test_avx2_input_sums_write_the_released_c_forms_bytes(tmp_path):
    probe = sum_by_axis.compile_probe(unpack_mnn_release(tmp_path / "mnn"), MNN_TREE, tmp_path / "probe")
    rows = sum_by_axis.same_bits(probe)
    assert len(rows) == len(sum_by_axis.CASES) == 432
    assert all(r["released"] == r["patched"] for r in rows), [r for r in rows if r["released"] != r["patched"]]
    # the probe tells cases apart (a constant hash would pass the comparison above)
    assert len({r["patched"] for r in rows}) > 300


def test_the_patched_tree_installs_the_avx2_form(tmp_path):
    """The probe compares patch 0005's form with MNN's, not MNN's with itself: the released tree has none."""
    path = "source/backend/cpu/x86_x64/avx/ReorderFunctions.cpp"
    assert "_AVX_MNNSumByAxisLForMatmul_A" in (MNN_TREE / path).read_text()
    assert "_AVX_MNNSumByAxisLForMatmul_A" not in (unpack_mnn_release(tmp_path / "mnn") / path).read_text()
