"""The store's records, shared by the store and its pulls: model IDs, the
model's info record, where a pulled model came from, and the per-model lock."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ..checks import invalid

MAX_ID_LENGTH = 96
#: in a pulled model's directory: where it came from (mnn_engine.store.pull)
SOURCE_FILE = ".source.json"


def model_id_from_name(name: str) -> str:
    """Slug a directory name into a model ID: lowercase ``[a-z0-9-]``, runs of
    anything else collapsed to one ``-`` (``Qwen3-0.6B-MNN`` -> ``qwen3-0-6b-mnn``)."""
    slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
    if not slug:
        raise invalid("model_id", f"{name!r} gives an empty model ID")
    if len(slug) > MAX_ID_LENGTH:
        raise invalid("model_id", f"is longer than {MAX_ID_LENGTH} characters")
    return slug


def served_name(model_id: str | None, path: str | None) -> str | None:
    """The name clients see for a model: its store ID, else its directory's name (None: neither)."""
    if model_id:
        return model_id
    if path:
        return path.rstrip("/").rsplit("/", 1)[-1] or "model"
    return None


def check_model_id(model_id: str) -> str:
    """Accept only IDs that are already in slug form."""
    if not isinstance(model_id, str) or model_id_from_name(model_id) != model_id:
        raise invalid("model_id", f"{model_id!r} is not a model ID ([a-z0-9-])")
    return model_id


@dataclass(frozen=True)
class ModelInfo:
    """A model in the store."""

    id: str
    name: str
    path: str
    size_bytes: int
    files: tuple[str, ...]
    is_visual: bool
    created: float
    #: a pulled model's source, repository, revision and commit (None: imported)
    source: dict[str, Any] | None = None
    #: the version a pull --update replaced, kept for ``rollback``: its size and revision
    previous: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["files"] = list(self.files)
        return data


def read_source(model_dir: Path) -> dict[str, Any] | None:
    """Where a pulled model came from (None for an imported one)."""
    with contextlib.suppress(OSError, ValueError):
        data = json.loads((model_dir / SOURCE_FILE).read_text())
        return data if isinstance(data, dict) else None
    return None


class ModelLock:
    """An advisory lock on one model ID, shared by every process using the
    store: shared while a model is loaded, exclusive while it is changed."""

    def __init__(self, path: Path, exclusive: bool) -> None:
        self.path = path
        self.exclusive = exclusive
        path.parent.mkdir(parents=True, exist_ok=True)
        self._fd: int | None = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(self._fd, (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | fcntl.LOCK_NB)
        except OSError:
            os.close(self._fd)
            self._fd = None
            raise

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing drops the lock
            self._fd = None

    def __enter__(self) -> ModelLock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
