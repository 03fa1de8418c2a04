"""What the device offers: how many threads a model should use by default.

A fixed default was wrong both ways: 4 threads on a 2-core machine decode at
a third of the speed of 2, and on a big.LITTLE phone threads on the
efficiency cores hold the fast ones back (every MNN thread waits for the
slowest at each layer). The default is therefore the number of performance
cores this process may run on:

- the CPUs of ``os.sched_getaffinity`` (a container, ``taskset`` or
  Android's cpuset may allow fewer than the machine has);
- of those, all but the slowest cluster (the efficiency cores), told apart
  by ``cpu_capacity`` (the kernel's relative performance, 1024 for the
  fastest core type), else by ``cpufreq/cpuinfo_max_freq``;
- at most ``MAX_DEFAULT_THREADS``: beyond that MNN's decode stops gaining on
  phones (memory bandwidth) and the system loses its interactivity.

A tuned preset (``bench --tune``) and an explicit ``threads`` still win.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

MAX_DEFAULT_THREADS = 4


@dataclass(frozen=True)
class CpuLayout:
    """The CPUs a process may use, and which of them are performance cores."""

    allowed: tuple[int, ...]
    performance: tuple[int, ...]
    source: str  # what told the cores apart: cpu_capacity, cpuinfo_max_freq, or none (all alike)

    @property
    def default_threads(self) -> int:
        return max(1, min(MAX_DEFAULT_THREADS, len(self.performance) or len(self.allowed)))


def _read_int(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def cpu_layout(sys_root: str | os.PathLike[str] = "/sys", allowed: set[int] | None = None) -> CpuLayout:
    """The layout from sysfs (``sys_root`` is a parameter so that tests can
    give real phones' trees)."""
    if allowed is None:
        try:
            allowed = os.sched_getaffinity(0)
        except (AttributeError, OSError):
            allowed = set(range(os.cpu_count() or 1))
    cpus = tuple(sorted(allowed))
    base = Path(sys_root) / "devices" / "system" / "cpu"
    for source, relative in (("cpu_capacity", "cpu_capacity"), ("cpuinfo_max_freq", "cpufreq/cpuinfo_max_freq")):
        values = {cpu: _read_int(base / f"cpu{cpu}" / relative) for cpu in cpus}
        known = {cpu: v for cpu, v in values.items() if v}
        if len(known) == len(cpus) and len(set(known.values())) > 1:
            slowest = min(known.values())
            return CpuLayout(cpus, tuple(cpu for cpu in cpus if known[cpu] > slowest), source)
    return CpuLayout(cpus, cpus, "none")


def default_threads() -> int:
    """Threads for a model load when neither options nor a preset say."""
    return cpu_layout().default_threads
