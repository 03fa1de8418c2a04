"""The child side of the first touch (``first_touch.check_in_child`` runs it):
load the model, exercise the tokenizer, the chat template and one forward (and
the visual or audio graph on a small image or sound, for such a model),
reporting each stage on stdout so the parent can name the one that crashed.
Only the child imports ``Llm``; the parent side never does."""

from __future__ import annotations

import io
import json
import os
import struct
import sys
import tempfile
import threading
import time
import wave
from pathlib import Path
from typing import Any

from ..errors import MnnEngineError
from . import media
from .first_touch import RESULT_PREFIX, STAGE_PREFIX
from .llm import Llm


def _stage(name: str) -> None:
    print(STAGE_PREFIX + name, flush=True)


def _child(config: str, overrides: dict[str, Any]) -> dict[str, Any]:
    llm = Llm(config, **overrides)
    _stage("load")
    llm.load_in_this_process()
    _stage("tokenize")
    ids = llm.tokenize("Hello, world! \u4f60\u597d \U0001F600 <think>")
    _stage("vocabulary")
    llm.detokenize_bytes(list(range(llm.vocab_size)))
    _stage("template")
    prompt = llm.apply_chat_template([{"role": "system", "content": "You are brief."},
                                      {"role": "user", "content": "Hi"}])
    _stage("forward")
    if llm.kind == "embedding":
        llm.embed(["Hi", "Hello, world!"])
    else:
        llm.generate(prompt, max_tokens=2, temperature=0)
    with tempfile.TemporaryDirectory(prefix="mnn-engine-first-touch-") as scratch:
        # a vision or audio model's own graph runs on its first image or sound: a wrong visual.mnn
        # (a text graph copied in) killed the server there with SIGSEGV
        if llm.file_config.get("is_visual"):
            _stage("image")
            _ask_about(llm, Path(scratch) / "grey.bmp", _grey_bmp(32, 32), "img")
        if llm.file_config.get("is_audio"):
            _stage("sound")
            _ask_about(llm, Path(scratch) / "silence.wav", _silent_wav(1.0), "audio")
    llm.close()
    return {"tokens": len(ids)}


def _ask_about(llm: Llm, path: Path, data: bytes, kind: str) -> None:
    path.write_bytes(data)
    with media.trusted(path, kind=kind):
        llm.generate([{"role": "user", "content": f"{media.tag(kind, str(path))}What is it?"}], max_tokens=1,
                     temperature=0)


def _grey_bmp(width: int, height: int) -> bytes:
    """A mid-grey 24-bit BMP (BITMAPFILEHEADER, BITMAPINFOHEADER, bottom-up rows padded to 4 bytes)."""
    row = b"\x80" * (3 * width) + b"\0" * (-3 * width % 4)
    pixels = row * height
    return (struct.pack("<2sIHHI", b"BM", 54 + len(pixels), 0, 0, 54)
            + struct.pack("<IiiHHIIiiII", 40, width, height, 1, 24, 0, len(pixels), 2835, 2835, 0, 0) + pixels)


def _silent_wav(seconds: float) -> bytes:
    out = io.BytesIO()
    with wave.open(out, "wb") as sound:
        sound.setnchannels(1)
        sound.setsampwidth(2)
        sound.setframerate(16000)
        sound.writeframes(b"\0\0" * int(16000 * seconds))
    return out.getvalue()


def end_with_parent() -> None:
    """Exit when the parent does: an orphaned check (a server killed while it
    waited, a damaged graph keeping MNN busy) would otherwise run on for up to
    ``first_touch.TIMEOUT_SECONDS`` on a core nobody uses any more."""
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(3)

    threading.Thread(target=watch, name="mnn-engine-parent-watch", daemon=True).start()


def main() -> None:
    """The child: ``python -c ... CONFIG_PATH OVERRIDES_JSON``."""
    end_with_parent()
    try:
        out = _child(sys.argv[1], json.loads(sys.argv[2]))
    except MnnEngineError as exc:
        out = {"code": exc.code, "message": exc.message, "param": exc.param}
    print(RESULT_PREFIX + json.dumps(out), flush=True)
