"""Test models for the suite (names, what they say, where they are), and a
canceller that does not race the run it cancels."""

from __future__ import annotations

import contextlib
import os
import platform
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BUILD_TOOL = REPO / "tools" / "models" / "build_test_models.py"
SCRIPTED_TEXT = "Hello! I am a tiny MNN test model, 你好 🪿."
TOOLCALL_TEXT = '<tool_call>{"name":"get_weather","arguments":{"city":"Paris"}}</tool_call>'
THINKING_TEXT = "<think>The user greets me.</think>\n\nHello there!"
QWEN_IM_END = 151645


def _mnn_patched() -> bool:
    from mnn_engine import build_info
    return build_info()["mode"] != "wheel"


#: Built with our MNN patches (subprojects/packagefiles/MNN): the PyPI wheel's MNN is not.
MNN_PATCHED = _mnn_patched()
#: Patch 0002, switched on as mnn-engine loads models, makes a batch's rows a lone row's (Llm.batch_exact:
#: speculation on by default in int4, exact there) where it was shown: x86-64 (AVX2 and AVX-512), and
#: aarch64 on every kernel family MNN has (tools/arm/probe.sh under qemu, docs/verified/arm-probe.json: no op
#: differs on ARMv8.0 NEON, ARMv8.2 fp16/sdot, ARMv8.6 i8mm and SME2 at a 512-bit vector length, in fp16 and
#: fp32; at other SME lengths patch 0003 leaves MNN's SME2 kernels off).
MNN_BATCH_EXACT = MNN_PATCHED and platform.machine() in ("x86_64", "AMD64", "aarch64")


def test_model_dir(name: str) -> Path:
    """Directory of a generated test model; built by the project's tool on
    first use, or taken from $MNN_ENGINE_TEST_MODELS when it holds it."""
    env = os.environ.get("MNN_ENGINE_TEST_MODELS")
    root = Path(env).expanduser() if env else None
    if root is not None and (root / name / "config.json").is_file():
        return root / name
    out = subprocess.run(
        [sys.executable, str(BUILD_TOOL), name], check=True, stdout=subprocess.PIPE, text=True
    ).stdout.strip().splitlines()
    return Path(out[-1])


test_model_dir.__test__ = False  # not a test, despite the name


@contextlib.contextmanager
def cancelling(cancel: Callable[[], None], every: float = 0.005) -> Iterator[None]:
    """Call ``cancel`` from another thread every ``every`` seconds while the
    body runs. A run clears the cancel flag when it starts, so a single cancel
    at a fixed time races the run's start (and, on a fast or a slow machine,
    its end); repeated ones stop it wherever it is."""
    done = threading.Event()

    def keep_cancelling() -> None:
        while not done.wait(every):
            cancel()

    thread = threading.Thread(target=keep_cancelling, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()
