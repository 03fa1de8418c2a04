"""Default thread counts from the device's CPU layout (mnn_engine.runtime.device),
on sysfs trees shaped like real phones' and on this machine."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from mnn_engine import LoadOptions
from mnn_engine.runtime.device import MAX_DEFAULT_THREADS, cpu_layout


def _sysfs(root: Path, capacities: list[int] | None = None, max_freqs: list[int] | None = None) -> Path:
    count = len(capacities or max_freqs or [])
    for cpu in range(count):
        d = root / "devices" / "system" / "cpu" / f"cpu{cpu}"
        (d / "cpufreq").mkdir(parents=True)
        if capacities:
            (d / "cpu_capacity").write_text(f"{capacities[cpu]}\n")
        if max_freqs:
            (d / "cpufreq" / "cpuinfo_max_freq").write_text(f"{max_freqs[cpu]}\n")
    return root


LAYOUTS = {
    # name: (cpu_capacity per cpu, expected performance cores, expected default threads)
    "4+3+1 (Snapdragon 8 Gen 1)": ([242] * 4 + [850] * 3 + [1024], [4, 5, 6, 7], 4),
    "4+4 (Exynos 9611)": ([406] * 4 + [1024] * 4, [4, 5, 6, 7], 4),
    "6+2 (Helio G85)": ([446] * 6 + [1024] * 2, [6, 7], 2),
    "4+2+2 (Tensor G1)": ([160] * 4 + [498] * 2 + [1024] * 2, [4, 5, 6, 7], 4),
    "8 alike": ([1024] * 8, list(range(8)), 4),
}


@pytest.mark.parametrize("name", list(LAYOUTS))
def test_performance_cores_by_capacity(tmp_path, name):
    capacities, performance, threads = LAYOUTS[name]
    layout = cpu_layout(_sysfs(tmp_path, capacities), allowed=set(range(len(capacities))))
    assert list(layout.performance) == performance and layout.default_threads == threads
    assert layout.source == ("none" if len(set(capacities)) == 1 else "cpu_capacity")


def test_max_frequency_tells_clusters_apart_without_capacity(tmp_path):
    layout = cpu_layout(_sysfs(tmp_path, max_freqs=[1800000] * 6 + [2400000] * 2), allowed=set(range(8)))
    assert layout.performance == (6, 7) and layout.source == "cpuinfo_max_freq" and layout.default_threads == 2


def test_affinity_limits_the_cores(tmp_path):
    root = _sysfs(tmp_path, [242] * 4 + [850] * 3 + [1024])
    layout = cpu_layout(root, allowed={0, 1, 6, 7})  # e.g. taskset or a cpuset
    assert layout.performance == (6, 7) and layout.default_threads == 2
    little_only = cpu_layout(root, allowed={0, 1})
    assert little_only.performance == (0, 1) and little_only.default_threads == 2


def test_missing_or_partial_sysfs_treats_cores_alike(tmp_path):
    assert cpu_layout(tmp_path, allowed={0, 1, 2}).default_threads == 3
    root = _sysfs(tmp_path / "partial", [242, 1024])
    assert cpu_layout(root, allowed={0, 1, 2}).source == "none"  # cpu2 unknown: no guess


def test_this_machine():
    allowed = os.sched_getaffinity(0)
    layout = cpu_layout()
    assert set(layout.allowed) == allowed and set(layout.performance) <= allowed
    assert 1 <= layout.default_threads <= min(MAX_DEFAULT_THREADS, len(allowed))
    assert LoadOptions().threads == layout.default_threads
