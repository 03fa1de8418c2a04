"""MNN's cache of prepared weights (``use_mmap`` with ``tmp_path``): where
it lives and when it must be emptied. The store keeps one per stored model
(``ModelStore.prepared_cache``); a model opened by path (``Llm(path)``) gets
one under the store's cache directory, by the directory's path."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

from .. import config
from .model_files import ModelDir, read_stamp

#: the store's directory of prepared-weight caches (``<store root>/cache``)
CACHE_DIR_NAME = "cache"


def path_cache_dir(cache_root: Path, model_dir: Path) -> Path:
    """The cache directory of a model opened by path, under ``cache_root``."""
    return cache_root / f"path-{hashlib.sha256(str(model_dir.resolve()).encode()).hexdigest()[:12]}"


def default_path_cache(model: ModelDir) -> Path:
    """A model directory's prepared-weight cache under the default store
    (``config.store_root()``), made fit for use (``prepare_cache``)."""
    cache = path_cache_dir(config.store_root() / CACHE_DIR_NAME, model.path)
    prepare_cache(cache, model)
    return cache


def prepare_cache(cache_dir: Path, model: ModelDir | Path, engine: dict[str, Any] | None = None) -> None:
    """Make ``cache_dir`` fit for MNN's ``tmp_path``: its mmap cache holds the
    prepared weights, packed by one engine build for one CPU's kernels, so it
    is emptied whenever the model's files change (size or modification time)
    or ``engine`` (default: ``build.engine_identity()``) differs, or MNN would
    map stale or foreign weights."""
    if engine is None:
        from .build import engine_identity

        engine = engine_identity()
    stamp: dict[str, Any] = {"engine": engine, **(model.stamp if isinstance(model, ModelDir) else read_stamp(model))}
    stamp_file = cache_dir / "model-stamp.json"
    try:
        current = json.loads(stamp_file.read_text())
    except (OSError, ValueError):
        current = None
    if current == stamp:
        return
    shutil.rmtree(cache_dir, ignore_errors=True)
    cache_dir.mkdir(parents=True, exist_ok=True)
    stamp_file.write_text(json.dumps(stamp))
