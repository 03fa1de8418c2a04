"""Shared helpers of the benchmark suite (run from the repository root)."""

from __future__ import annotations

import json
import os
import platform
import statistics
import sys
import tarfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "bench-results"
# MNN 3.6.1 as released (the pinned commit), what the kernel probes compare our patched tree with
MNN_TARBALL = Path(os.environ.get("MNN_TARBALL", REPO.parent / "shared" / "vendor" / "MNN-3.6.1.tar.gz"))
MNN_TREE = REPO / "subprojects" / "MNN"  # the patched tree the build uses
# the parts of MNN's tree its kernel files include
MNN_INCLUDED = ("include/", "source/", "schema/current/", "3rd_party/flatbuffers/include/")
sys.path.insert(0, str(REPO / "tests"))
from support import test_model_dir  # noqa: E402 - one place locates the test models


def test_model(name: str) -> Path:
    """A generated model directory (built on first use): the suite's own helper."""
    return test_model_dir(name)


def median(values: list[float]) -> float:
    return statistics.median(values) if values else 0.0


def round_ratios(ours: list[float], baseline: list[float]) -> list[float]:
    """The per-round ratios ours[i] / baseline[i]."""
    return [a / b for a, b in zip(ours, baseline, strict=True)]


def threads_named(threads: int) -> str:
    """What a run on ``threads`` threads adds to its CPU kind: nothing for the usual 2, so only the rows of
    another count name it (and are kept beside the usual ones)."""
    return "" if threads == 2 else f", {threads} thread{'s' if threads > 1 else ''}"


def paired_ratio(ours: list[float], baseline: list[float]) -> float:
    """Median of the per-round ratios ours[i] / baseline[i]. Runs of one round are adjacent in time, so
    this cancels slow drifts of the machine that a ratio of the two medians keeps."""
    return statistics.median(round_ratios(ours, baseline)) if ours else 0.0


def quantile(values: list[float], q: float) -> float:
    from mnn_engine.cli.bench import percentile

    return percentile(values, q)


def unpack_mnn_release(into: Path) -> Path:
    """The parts of the vendored MNN 3.6.1 its kernel files need, as released (no patch), under ``into``."""
    with tarfile.open(MNN_TARBALL) as tar:
        members = [m for m in tar.getmembers()
                   if "/" in m.name and m.name.split("/", 1)[1].startswith(MNN_INCLUDED)]
        for m in members:
            m.name = m.name.split("/", 1)[1]
        tar.extractall(into, members=members, filter="data")
    return into


def differing(cases: list[dict]) -> list[dict]:
    """The kernel-probe cases whose hash from MNN as released and from our patched code differ."""
    return [case for case in cases if case["released"] != case["patched"]]


def require_same_bits(cases: list[dict], change: str) -> None:
    """Exit naming ``change`` and the cases if any of them differs; else say how many were the same."""
    if differ := differing(cases):
        raise SystemExit(f"{change} changed what the kernel writes: {differ}")
    print(f"{len(cases)} cases: the same bytes as MNN as released", flush=True)


def mnn_includes(tree: Path) -> list[str]:
    """The compiler's -I options for MNN sources in ``tree``."""
    return [f"-I{tree / d}" for d in MNN_INCLUDED]


def _cpuinfo() -> str:
    try:
        return Path("/proc/cpuinfo").read_text(errors="replace")
    except OSError:
        return ""


def cpuinfo_field(cpuinfo: str, *keys: str) -> str | None:
    """The value of the first line of ``cpuinfo`` whose field is one of ``keys`` (the whole name: "model" is
    not "model name"), or None."""
    for line in cpuinfo.splitlines():
        field, sep, value = line.partition(":")
        if sep and field.strip() in keys:
            return value.strip()
    return None


def cpu_flags(cpuinfo: str | None = None) -> list[str]:
    """The CPU's feature flags: the first "flags" (x86) or "Features" (ARM) line of ``cpuinfo``, by default
    /proc/cpuinfo's (none where it cannot be read)."""
    return (cpuinfo_field(_cpuinfo() if cpuinfo is None else cpuinfo, "flags", "Features") or "").split()


def machine() -> dict[str, Any]:
    info = _cpuinfo()
    cpu = cpuinfo_field(info, "model name") or "unknown"
    flags = cpu_flags(info)
    if "avx512f" in flags:
        cpu += " (AVX-512)"
    elif "avx2" in flags:
        cpu += " (AVX2, no AVX-512)"
    import os

    # the model name alone hides the generation (a Zen 4 and a Zen 5 EPYC both say "AMD EPYC" in these VMs)
    cpu_id = f"family {cpuinfo_field(info, 'cpu family') or '?'} model {cpuinfo_field(info, 'model') or '?'}"
    return {"cpu": cpu, "cpu_id": cpu_id, "cores": os.cpu_count(),
            "system": platform.platform(), "python": platform.python_version(),
            "date": time.strftime("%Y-%m-%d %H:%M:%S")}


def run_worker(code: str, *args: object, env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run ``code`` in a fresh Python process (this interpreter, from ``/`` so
    that the installed package is imported, not the checkout) and return the
    JSON object its last line of output prints."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", code, *map(str, args)], check=True, capture_output=True, text=True,
                         cwd="/", env=env).stdout
    return json.loads(out.strip().splitlines()[-1])


def alternating(rounds: int, names: Sequence[T]) -> Iterator[T]:
    """``names`` once per round, in order on even rounds and reversed on odd ones (none always runs first)."""
    for r in range(rounds):
        yield from (names if r % 2 == 0 else names[::-1])


def libmnn_env(libdir: str | Path | None) -> dict[str, str]:
    """This environment with ``libdir``'s libMNN.so first (``None``: the installed one). The extension finds
    libMNN through its RUNPATH, which ``LD_LIBRARY_PATH`` overrides, so one install runs either library."""
    env = dict(os.environ)
    if libdir:
        env["LD_LIBRARY_PATH"] = ":".join(filter(None, [str(libdir), env.get("LD_LIBRARY_PATH")]))
    return env


#: round trips above this are cores that share no cache (another CCD, another socket); below, cores sharing
#: an L3 (about 50 ns on the project's EPYC VMs, about 370 ns across CCDs: see core_handoff.c)
FAR_CORES_NS = 150.0


def core_handoff_ns() -> float | None:
    """The cache-line round trip between CPUs 0 and 1 right now (``core_handoff.c``), or ``None`` where
    there are fewer than two CPUs or no C compiler. Compiled once per source into the project's cache."""
    import hashlib
    import shutil
    import subprocess

    source = Path(__file__).with_name("core_handoff.c")
    compiler = shutil.which("cc") or shutil.which("gcc")
    if (os.cpu_count() or 1) < 2 or compiler is None:
        return None
    digest = hashlib.sha256(source.read_bytes()).hexdigest()[:12]
    binary = Path.home() / ".cache" / "mnn-engine" / "bench" / f"core_handoff-{digest}"
    if not binary.exists():
        binary.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run([compiler, "-O2", "-pthread", str(source), "-o", str(binary)], check=True)
    done = subprocess.run([str(binary)], capture_output=True, text=True)
    return float(done.stdout) if done.returncode == 0 else None


def placement(handoff_ns: float | None) -> str:
    """``"near"`` (cores sharing a cache), ``"far"`` or ``"unknown"`` for a ``core_handoff_ns`` reading."""
    if handoff_ns is None:
        return "unknown"
    return "far" if handoff_ns > FAR_CORES_NS else "near"


def agreed_placement(readings: Sequence[float | None]) -> str:
    """Where the two cores were during a measurement from the ``core_handoff_ns`` readings taken around it:
    the placement they all agree on, else ``"moved"`` (the host moved the cores while it ran)."""
    places = {placement(v) for v in readings}
    return places.pop() if len(places) == 1 else "moved"


def cpu_kind(info: dict[str, Any]) -> str:
    """A ``machine()``'s kind of CPU: its model name and, where recorded, its family and model (runs
    before 2026-12-06 did not record them)."""
    return f"{info['cpu']}, {info['cpu_id']}" if info.get("cpu_id") else info["cpu"]


def by_threads(tok_s: dict[str, float]) -> str:
    """Tokens/s by thread count (``{"1": 47.0, "2": 90.0}``) as "47 tok/s (1 thr), 90 tok/s (2 thr)"."""
    return ", ".join(f"{v:.0f} tok/s ({t} thr)" for t, v in tok_s.items())


def runs_by_cpu(data: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """A results file's runs by kind of CPU (``save_by_cpu``; a file of one run, as files were before, is its
    only one; an empty one has none)."""
    if "by_cpu" in data:
        return dict(data["by_cpu"])
    return {cpu_kind(data["machine"]): data} if "machine" in data else {}


def save_by_cpu(name: str, report: dict[str, Any], kind: str) -> Path:
    """Save ``report`` (a run on the CPU kind ``kind``) in ``name``.json beside the kept runs of other
    kinds, in place of the last one of its own: the kernels differ per instruction set and the cores
    per generation, so every kind measured stays in the report."""
    try:
        kept = json.loads((RESULTS / f"{name}.json").read_text())
    except (OSError, ValueError):
        kept = {}
    return save(name, {"by_cpu": {**runs_by_cpu(kept), kind: report}})


def save(name: str, data: Any) -> Path:
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps(data, indent=2))
    return path


def vm_hwm_mib(pid: int) -> float:
    """Peak resident memory of a process (Linux /proc)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0
