"""Backends kept in libraries of their own (MNN_SEP_BUILD, Termux's mnn-backend-*
subpackages): found next to the libMNN.so in use, counted as compiled, loaded
before a model is created on them."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from mnn_engine import MnnEngineError, _mnn
from mnn_engine.runtime import build

MAPS = """\
55d0c0000000-55d0c0001000 r--p 00000000 fe:01 123 /usr/bin/python3.11
7f0000000000-7f0000100000 r-xp 00000000 fe:01 456 /data/data/com.termux/files/usr/lib/libMNN.so
7f0000200000-7f0000300000 r-xp 00000000 fe:01 789 /data/data/com.termux/files/usr/lib/libMNN_Express.so
7f0000400000-7f0000401000 rw-p 00000000 00:00 0
7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0 [stack]
"""


def test_the_mapped_library_directory_comes_from_the_maps():
    assert build.mapped_library_dir("libMNN.so", MAPS) == Path("/data/data/com.termux/files/usr/lib")
    assert build.mapped_library_dir("libMNN_Express.so", MAPS) == Path("/data/data/com.termux/files/usr/lib")
    assert build.mapped_library_dir("libllm.so", MAPS) is None
    assert build.mapped_library_dir("libMNN.so", "") is None


def test_this_process_maps_are_read():
    extension = Path(_mnn.__file__).resolve()  # mapped, since it is imported
    assert build.mapped_library_dir(extension.name) == extension.parent


def _real_shared_library() -> Path:
    for candidate in ("/lib/x86_64-linux-gnu/libz.so.1", "/usr/lib/x86_64-linux-gnu/libz.so.1",
                      "/lib/aarch64-linux-gnu/libz.so.1", "/usr/lib/aarch64-linux-gnu/libz.so.1"):
        if Path(candidate).is_file():
            return Path(candidate)
    pytest.skip("no libz.so.1 to stand in for a backend library")


@pytest.fixture
def mnn_lib_dir(tmp_path, monkeypatch):
    """A directory standing in for the one the loaded libMNN.so is in."""
    monkeypatch.setattr(build, "mapped_library_dir", lambda name, maps=None: tmp_path if name == "libMNN.so" else None)
    monkeypatch.setattr(build, "_loaded_backend_libraries", {})
    return tmp_path


def test_an_installed_backend_library_counts_as_compiled_and_loads_once(mnn_lib_dir, monkeypatch):
    assert build.backend_library("opencl") is None and build.load_backend_library("opencl") is False
    shutil.copy(_real_shared_library(), mnn_lib_dir / "libMNN_CL.so")
    assert build.backend_library("opencl") == mnn_lib_dir / "libMNN_CL.so"
    assert build.backend_library("vulkan") is None and build.backend_library("cpu") is None
    caps = build.backend_capabilities()
    assert caps["opencl"]["compiled"] is True
    monkeypatch.setenv("MNN_ENGINE_ASSUME_BACKENDS", "opencl")
    build.require_backend("opencl")  # available (assumed), so it loads the library
    assert "opencl" in build._loaded_backend_libraries
    first = build._loaded_backend_libraries["opencl"]
    assert build.load_backend_library("opencl") is True and build._loaded_backend_libraries["opencl"] is first


def test_a_damaged_backend_library_is_a_warning_not_a_crash(mnn_lib_dir, caplog):
    (mnn_lib_dir / "libMNN_Vulkan.so").write_bytes(b"\x7fELF not really")
    assert build.load_backend_library("vulkan") is False
    assert "does not load" in caplog.text


def test_a_missing_backend_package_is_named_in_the_error(mnn_lib_dir, monkeypatch):
    info = {**build.build_info(), "mode": "system", "backends_compiled": ["cpu"]}
    monkeypatch.setattr(build, "build_info", lambda: info)
    with pytest.raises(MnnEngineError) as caught:
        build.require_backend("vulkan")
    assert caught.value.code == "backend_unavailable"
    assert "pkg install mnn-backend-vulkan" in str(caught.value)
    shutil.copy(_real_shared_library(), mnn_lib_dir / "libMNN_Vulkan.so")
    monkeypatch.setattr(build, "_loadable", lambda names: False)  # no Vulkan driver here
    with pytest.raises(MnnEngineError, match="not usable on this device"):
        build.require_backend("vulkan")


def _stack_is_executable(path: Path) -> bool:
    """Whether the ELF file's PT_GNU_STACK asks for an executable stack (or it has none:
    then the loader assumes one). Read from the program headers (ELF64, little endian)."""
    import struct

    data = path.read_bytes()
    assert data[:4] == b"\x7fELF" and data[4] == 2 and data[5] == 1
    phoff, = struct.unpack_from("<Q", data, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", data, 0x36)
    for i in range(phnum):
        p_type, p_flags = struct.unpack_from("<II", data, phoff + i * phentsize)
        if p_type == 0x6474E551:  # PT_GNU_STACK
            return bool(p_flags & 1)  # PF_X
    return True


def test_our_libraries_do_not_ask_for_an_executable_stack():
    # glibc 2.41 and later refuse to dlopen a library that does ("cannot enable executable stack
    # as shared object requires"): MNN's x86 assembly has no .note.GNU-stack, so the source
    # build links libMNN.so with -z noexecstack (meson.build). PyPI's mnn==3.6.1 (wheel mode)
    # still asks for one; that library is not ours to build.
    extension = Path(_mnn.__file__)
    assert not _stack_is_executable(extension)
    if build.build_info()["mode"] == "subproject":
        assert not _stack_is_executable(build.mapped_library_dir("libMNN.so") / "libMNN.so")
