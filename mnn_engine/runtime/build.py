"""What this installation was built with, and which backends it can use."""

from __future__ import annotations

import ctypes
import logging
from pathlib import Path
from typing import Any

from .. import _mnn, config

log = logging.getLogger(__name__)

BACKENDS = ("cpu", "opencl", "vulkan", "hexagon")

# Where GPU drivers live on Android (Adreno/Mali vendor libraries) and desktop Linux.
_DRIVER_LIBRARIES = {
    "opencl": ["libOpenCL.so", "libOpenCL.so.1", "/vendor/lib64/libOpenCL.so", "/system/vendor/lib64/libOpenCL.so",
               "/vendor/lib64/egl/libGLES_mali.so", "/system/lib64/libOpenCL.so"],
    "vulkan": ["libvulkan.so", "libvulkan.so.1", "/system/lib64/libvulkan.so"],
    "hexagon": ["libQnnHtp.so", "/vendor/lib64/libQnnHtp.so"],
}


# An MNN built with MNN_SEP_BUILD=ON (Termux's mnn package) keeps each GPU
# backend in a library of its own next to libMNN.so (the mnn-backend-NAME
# subpackages); loading it registers the backend with MNN.
BACKEND_LIBRARIES = {"opencl": "libMNN_CL.so", "vulkan": "libMNN_Vulkan.so"}
_loaded_backend_libraries: dict[str, ctypes.CDLL] = {}


def build_info() -> dict[str, Any]:
    """Provenance of the native build: mode (wheel, system, subproject), MNN
    version and commit, compiler, flags and the backends compiled in."""
    return _mnn.build_info()


# CPU features that decide which MNN kernels run and how weights are packed for them.
_KERNEL_FEATURES = {
    "sse4_1", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512dq", "avx512vl", "avx512_vnni",
    "avx_vnni", "avx512_bf16", "amx_int8", "amx_bf16",  # x86-64
    "asimd", "asimdhp", "asimddp", "i8mm", "bf16", "sve", "sve2", "sme", "sme2",  # aarch64
}


def cpu_kernel_features(cpuinfo: str | None = None) -> list[str]:
    """The CPU features MNN dispatches on, as /proc/cpuinfo lists them."""
    if cpuinfo is None:
        try:
            with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
                cpuinfo = f.read()
        except OSError:
            cpuinfo = ""
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip().lower() in ("flags", "features"):
            return sorted(_KERNEL_FEATURES.intersection(value.split()))
    return []


def engine_identity() -> dict[str, Any]:
    """What prepared (mmap-cached) weights and the load-time checks' verdicts
    depend on besides the model: the engine build, the native files in use
    (a rebuilt or swapped libMNN with the same version and commit, e.g. one
    with another patch set, is another engine) and the CPU features its
    kernels were chosen for."""
    info = build_info()
    build = {k: info[k] for k in ("mode", "mnn_version", "mnn_commit", "mnn_source", "compiler", "flags")}
    return {"build": build, "libraries": native_library_stamps(), "cpu": cpu_kernel_features()}


def native_library_stamps(maps: str | None = None) -> dict[str, list[Any]]:
    """Path, size and modification time of the native files this process
    runs MNN with: the ``_mnn`` extension and the ``libMNN.so`` it mapped
    (none in a build that links MNN statically)."""
    files = {"extension": Path(_mnn.__file__)}
    directory = mapped_library_dir("libMNN.so", maps)
    if directory is not None:
        files["libMNN"] = directory / "libMNN.so"
    stamps: dict[str, list[Any]] = {}
    for key, path in files.items():
        try:
            info = path.stat()
        except OSError:
            continue
        stamps[key] = [str(path.resolve()), info.st_size, info.st_mtime_ns]
    return stamps


def mapped_library_dir(name: str, maps: str | None = None) -> Path | None:
    """The directory of the shared library ``name`` (e.g. ``libMNN.so``) that
    this process has mapped, read from ``/proc/self/maps`` (or ``maps``)."""
    if maps is None:
        try:
            maps = Path("/proc/self/maps").read_text(encoding="utf-8", errors="replace")
        except OSError:
            return None
    for line in maps.splitlines():
        fields = line.split(None, 5)
        if len(fields) == 6 and fields[5].endswith("/" + name):
            return Path(fields[5]).parent
    return None


def backend_library(name: str) -> Path | None:
    """The separately built library of backend ``name`` installed next to the
    libMNN.so in use, or None (backend built into libMNN, or not installed)."""
    file = BACKEND_LIBRARIES.get(name)
    directory = mapped_library_dir("libMNN.so") if file else None
    if file is None or directory is None or not (directory / file).is_file():
        return None
    return directory / file


def load_backend_library(name: str) -> bool:
    """Load backend ``name``'s separate library, once, so that MNN can create
    the backend; False when there is none to load (or it does not load)."""
    if name in _loaded_backend_libraries:
        return True
    path = backend_library(name)
    if path is None:
        return False
    try:
        _loaded_backend_libraries[name] = ctypes.CDLL(str(path))
    except OSError as exc:
        log.warning("MNN's %s backend library %s does not load: %s", name, path, exc)
        return False
    return True


def _loadable(names: list[str]) -> bool:
    for name in names:
        try:
            ctypes.CDLL(name)
            return True
        except OSError:
            continue
    return False


def backend_capabilities() -> dict[str, dict[str, bool]]:
    """Per backend: ``compiled`` into this build and ``available`` on this device.

    A backend is compiled when the build recorded it or its separate library
    (``BACKEND_LIBRARIES``) is installed next to libMNN.so. CPU is always
    available. A GPU or NPU backend is available when it is compiled and its
    driver library loads here (what MNN needs to create it; ``LD_LIBRARY_PATH``
    matters on Android, see docs/termux.md). Set
    ``MNN_ENGINE_ASSUME_BACKENDS=opencl,vulkan`` to override the probe."""
    compiled = set(build_info()["backends_compiled"]) | {"cpu"}
    compiled |= {name for name in BACKEND_LIBRARIES if backend_library(name) is not None}
    assumed = config.assumed_backends()
    caps = {}
    for name in BACKENDS:
        is_compiled = name in compiled
        available = name == "cpu" or (is_compiled and (name in assumed or _loadable(_DRIVER_LIBRARIES[name])))
        caps[name] = {"compiled": is_compiled, "available": available}
    return caps


def require_backend(name: str) -> None:
    """Raise ``backend_unavailable`` unless ``name`` is usable here: MNN itself
    would quietly fall back to the CPU."""
    from ..errors import MnnEngineError

    caps = backend_capabilities().get(name)
    if caps is None or not caps["available"]:
        if caps and caps["compiled"]:
            state = "not usable on this device (no driver library loads)"
        else:
            state = "not compiled into this build"
            if name in BACKEND_LIBRARIES and build_info()["mode"] == "system":
                state += f" (Termux: pkg install mnn-backend-{name})"
        raise MnnEngineError("backend_unavailable", f"backend {name!r} is {state}", param="backend")
    load_backend_library(name)
