"""This process's scratch directory, which the next process cleans if a crash
or ``kill -9`` left it behind.

Decoded client images and other short-lived files go under
``$TMPDIR/mnn-engine-<uid>/<pid>-<start time>/`` (mode 0700; ``$TMPDIR`` is
set on Termux, where /tmp does not exist). The first use in a process removes
the directories of processes that are no longer running.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import threading
from pathlib import Path

_lock = threading.Lock()
_mine: Path | None = None


def _process_start(pid: int) -> str | None:
    """The process's start time (clock ticks since boot), None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[19].decode()
    except (OSError, IndexError):
        return None


def _alive(name: str) -> bool:
    pid, _, start = name.partition("-")
    if not pid.isdigit():
        return False
    now = _process_start(int(pid))
    if now is not None:
        return now == start
    try:  # no /proc: fall back to whether the pid exists
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def scratch_root() -> Path:
    return Path(tempfile.gettempdir()) / f"mnn-engine-{os.getuid()}"


def scratch_dir() -> Path:
    """This process's scratch directory (created, and stale ones removed, on first use)."""
    global _mine
    with _lock:
        if _mine is not None and _mine.is_dir():
            return _mine
        root = scratch_root()
        root.mkdir(mode=0o700, exist_ok=True)
        info = root.lstat()
        if root.is_symlink() or info.st_uid != os.getuid():
            raise PermissionError(f"{root} is not a directory of this user's")
        for entry in root.iterdir():
            if not _alive(entry.name):
                shutil.rmtree(entry, ignore_errors=True)
        pid = os.getpid()
        mine = root / f"{pid}-{_process_start(pid) or 0}"
        with contextlib.suppress(FileExistsError):
            mine.mkdir(mode=0o700)
        _mine = mine
        return mine
