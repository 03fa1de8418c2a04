"""Capture what MNN prints straight to file descriptors 1 and 2 into logging.

MNN writes with printf/fprintf, bypassing ``sys.stdout``, so neither a
notebook nor a server log would see it, and it would litter a terminal. Around
the native calls that print (create, load, close) both descriptors are pointed
at a temporary file; afterwards each line goes to the ``mnn_engine.mnn``
logger. The window is kept short because it is process-wide.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import sys
import tempfile
import threading
from collections.abc import Iterator

log = logging.getLogger("mnn_engine.mnn")

_lock = threading.RLock()
_depth = 0

_WARNING_WORDS = ("error", "fail", "can't", "cannot", "not found", "invalid", "open")


_libc = ctypes.CDLL(None)  # the process's C library, which MNN's printf buffers live in


def _libc_fflush() -> None:
    """fflush(NULL): push out what MNN left in C stdio buffers."""
    with contextlib.suppress(Exception):
        _libc.fflush(None)


def _flush_all() -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    _libc_fflush()


def _emit(text: str) -> list[str]:
    lines = [line.rstrip() for line in text.splitlines() if line.strip()]
    for line in lines:
        lowered = line.lower()
        level = logging.WARNING if any(w in lowered for w in _WARNING_WORDS) else logging.INFO
        log.log(level, "%s", line)
    return lines


@contextlib.contextmanager
def captured_native_output() -> Iterator[list[str]]:
    """Redirect fds 1 and 2 for the duration; yields the list that receives
    the captured lines (filled on exit), which are also logged."""
    global _depth
    lines: list[str] = []
    with _lock:
        if _depth:  # nested: the outer capture collects everything
            _depth += 1
            try:
                yield lines
            finally:
                _depth -= 1
            return
        try:
            saved = (os.dup(1), os.dup(2))
        except OSError:  # no usable stdout/stderr (daemon): nothing to capture
            yield lines
            return
        sink = tempfile.TemporaryFile(prefix="mnn-engine-native-")  # noqa: SIM115 (closed below)
        _depth = 1
        try:
            _flush_all()
            os.dup2(sink.fileno(), 1)
            os.dup2(sink.fileno(), 2)
            yield lines
        finally:
            _flush_all()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])
            _depth = 0
            sink.seek(0)
            lines.extend(_emit(sink.read().decode("utf-8", "replace")))
            sink.close()
