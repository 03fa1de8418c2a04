"""The mnn recipe against MNN's real CMakeLists.txt, configured the way
termux-packages configures it for Android: termux_step_configure_cmake's
bionic arguments (-DCMAKE_SYSTEM_NAME=Android, a standalone toolchain),
here through the stand-in toolchain of tools/termux/android_toolchain.sh.
MNN's Android branches decide where its libraries go and what they link."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from support import REPO

MNN_SOURCE = REPO / "subprojects" / "MNN"
RECIPE = REPO / "packaging" / "termux" / "mnn"
# what the recipe's termux_step_make_install installs, each found once in the build tree
LIBRARIES = ["libMNN.so", "libMNN_Express.so", "libllm.so", "libMNNOpenCV.so", "libMNNAudio.so", "libMNN_CL.so",
             "libMNN_Vulkan.so"]

pytestmark = pytest.mark.skipif(
    shutil.which("aarch64-linux-gnu-gcc") is None or shutil.which("cmake") is None
    or not (MNN_SOURCE / "CMakeLists.txt").is_file(),
    reason="needs g++-aarch64-linux-gnu, cmake and the MNN sources (.ci/run has all three)")


def configure(tmp_path: Path, drop: tuple[str, ...] = ()) -> tuple[str, dict[str, str]]:
    """The recipe's configure step (less the arguments ``drop``); the CMake output and
    the build's shared libraries, name -> path in the build tree."""
    drops = "".join(f"TERMUX_PKG_EXTRA_CONFIGURE_ARGS=${{TERMUX_PKG_EXTRA_CONFIGURE_ARGS/{arg}/}}\n" for arg in drop)
    script = f"""
set -euo pipefail
. {REPO}/tools/termux/build_steps.sh
termux_setup_toolchain {tmp_path}
unset CMAKE_C_COMPILER_LAUNCHER CMAKE_CXX_COMPILER_LAUNCHER
TERMUX_PKG_SRCDIR={MNN_SOURCE} TERMUX_PKG_BUILDDIR={tmp_path}/build TERMUX_PKG_BUILDER_DIR={RECIPE}
. {RECIPE}/build.sh
{drops}if declare -F termux_step_pre_configure >/dev/null; then termux_step_pre_configure; fi
mkdir -p "$TERMUX_PKG_BUILDDIR" && cd "$TERMUX_PKG_BUILDDIR"
termux_step_configure_cmake
"""
    result = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    ninja = (tmp_path / "build" / "build.ninja").read_text()
    outputs = {}
    for path, rule in re.findall(r"^build ([^:\s]+\.so): (\S+)", ninja, re.M):
        if rule != "phony":
            outputs.setdefault(Path(path).name, []).append(path)
    assert all(len(paths) == 1 for paths in outputs.values()), outputs
    return result.stdout, {name: paths[0] for name, paths in outputs.items()}


def test_mnn_takes_its_android_branches_and_puts_each_library_where_the_recipe_installs_it(tmp_path):
    output, libraries = configure(tmp_path)
    assert "Android: Targeting API '24' with architecture 'arm64'" in output
    assert "\tSystem: Android" in output and "\tKleidiAI: OFF" in output
    assert sorted(libraries) == sorted(LIBRARIES)
    assert not [path for path in libraries.values() if "OFF/" in path]
    ninja = (tmp_path / "build" / "build.ninja").read_text()
    assert "-DMNN_BUILD_FOR_ANDROID" in ninja  # CMakeLists.txt: add_definitions on Android only
    # the Android-only link line, and MNN's Linux one not taken
    link = re.search(r"^build libMNN\.so: .*?\n(?:  .*\n)*", ninja, re.M).group(0)
    assert "-llog  -lm  -landroid" in link and "-pthread" not in link
    assert "--target=aarch64-linux-android24" in ninja  # termux's bionic flags reach the compiler line


def test_without_the_android_command_flag_the_libraries_go_to_an_abi_directory(tmp_path):
    # why the recipe sets MNN_BUILD_FOR_ANDROID_COMMAND: otherwise MNN writes them to
    # ${NATIVE_LIBRARY_OUTPUT}/${ANDROID_ABI} (OFF/ when neither is set: ANDROID_ABI only comes
    # from the NDK's own toolchain file), each relative to its own directory
    _, libraries = configure(tmp_path, drop=("-DMNN_BUILD_FOR_ANDROID_COMMAND=ON",))
    assert libraries["libMNN.so"] == "OFF/libMNN.so"
    assert libraries["libMNN_Express.so"] == "express/OFF/libMNN_Express.so"
