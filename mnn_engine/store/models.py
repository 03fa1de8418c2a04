"""The model store: import, list, rename and delete models, and their caches.

Layout under the store root (``$MNN_ENGINE_HOME``, else
``$XDG_DATA_HOME/mnn-engine``, else ``~/.local/share/mnn-engine``)::

    models/<id>/          one complete MNN model directory per model ID
    models/.import-*      an import in progress (never listed; removed when stale)
    cache/<id>/           MNN's tmp_path for that model (mmap and GPU caches)
    previous/<id>/        the version a pull --update replaced (mnn_engine.store.pull)
    downloads/<id>/       a pull in progress (mnn_engine.store.pull)
    presets/<id>.json     the load options ``bench --tune`` measured fastest
    options/<id>.json     the load options set with ``models config`` (they win over the preset)
    adapters/<id>/<name>/ the LoRA adapters exported over that model (mnn_engine.store.adapters)

An import validates the source, copies it into a hidden directory inside the
store and renames it into place, so a crash or kill mid-copy never leaves a
model that lists or loads.
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import re
import shutil
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from .. import config
from ..checks import invalid
from ..errors import MnnEngineError
from ..runtime.first_touch import check_in_child
from ..runtime.model_files import (
    CONFIG_NAME,
    ModelDir,
    display_name,
    model_files,
    read_config,
    read_model_dir,
    resolve_config_path,
    validate_model_dir,
)
from ..runtime.prepared_cache import CACHE_DIR_NAME, path_cache_dir, prepare_cache
from .adapters import ADAPTERS_DIR, AdapterShelf
from .layout import SOURCE_FILE, ModelInfo, ModelLock, check_model_id, model_id_from_name, read_source
from .pull import pull, pull_adapter, rollback

_IMPORT_PREFIX = ".import-"
_TRASH_PREFIX = ".trash-"

#: progress(copied_bytes, total_bytes, current_file)
ProgressCallback = Callable[[int, int, str], None]


def store_root() -> Path:
    """Where the store lives (see the module doc; ``config.store_root``)."""
    return config.store_root()


# Each model directory's reading (``ModelStore.model_dir``), shared by every store object of this process (a
# pool gives each engine its own): by the config's path and the directory's inode (an import or a pull
# replaces the directory), until a file changes; the most recently read ones are kept.
_READINGS: collections.OrderedDict[tuple[Path, int], ModelDir] = collections.OrderedDict()
_READINGS_LOCK = threading.Lock()
_READINGS_KEPT = 64


def _fresh_reading(config_path: Path) -> ModelDir | None:
    """The kept reading of a model directory if its files are as they were (a stat each, nothing read)."""
    key = (config_path, _inode(config_path.parent))
    with _READINGS_LOCK:
        known = _READINGS.get(key)
        if known is not None:
            _READINGS.move_to_end(key)
    return known if known is not None and not known.is_stale() else None


def _inode(path: Path) -> int:
    try:
        return path.stat().st_ino
    except OSError:
        return -1


def _tree_files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file())


def _model_files(root: Path) -> list[Path]:
    """A stored model's own files (not the store's note of where it came from)."""
    return [f for f in _tree_files(root) if f.name != SOURCE_FILE]


def _dir_size(root: Path) -> int:
    total = 0
    for path in root.rglob("*"):
        with contextlib.suppress(OSError):
            if path.is_file() and not path.is_symlink():
                total += path.stat().st_size
    return total


def _exists(model_id: str) -> MnnEngineError:
    return MnnEngineError("model_exists", f"a model {model_id!r} is already in the store (replace it with "
                          "--replace / replace=True, or pick another ID with --id / model_id=)", param="model_id")


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class ModelStore(AdapterShelf):
    """Models on disk, and their LoRA adapters (``AdapterShelf``).
    ``in_use(model_id)`` (set by the engine) tells which model or adapter is
    loaded: such a model cannot be renamed, deleted, replaced or have its
    cache cleared."""

    def __init__(self, root: str | os.PathLike[str] | None = None) -> None:
        self.root = Path(root).expanduser() if root is not None else store_root()
        self.models_dir = self.root / "models"
        self.cache_dir = self.root / CACHE_DIR_NAME
        self.in_use: Callable[[str], bool] = lambda _model_id: False

    # ---------------------------------------------------------------- queries
    def path(self, model_id: str) -> Path:
        return self.models_dir / check_model_id(model_id)

    def cache_path(self, model_id: str) -> Path:
        return self.cache_dir / check_model_id(model_id)

    def previous_path(self, model_id: str) -> Path:
        """Where the version a pull --update replaced is kept."""
        return self.root / "previous" / check_model_id(model_id)

    def model_dir(self, model_dir: Path) -> ModelDir:
        """A model directory read and validated (``read_model_dir``), once
        while its files stay as they were: a later call stats them and reads
        again only if one changed (pull --update, import --replace)."""
        config_path = resolve_config_path(model_dir)
        known = _fresh_reading(config_path)
        if known is not None:
            return known
        read = read_model_dir(config_path)
        with _READINGS_LOCK:
            _READINGS[(config_path, _inode(config_path.parent))] = read
            while len(_READINGS) > _READINGS_KEPT:
                _READINGS.popitem(last=False)
        return read

    def prepared_cache(self, model_id: str | None, model: ModelDir | Path) -> Path:
        """MNN's ``tmp_path`` for a model (by store ID, else by its directory's
        path), emptied if the model's files changed since it was filled."""
        where = model.path if isinstance(model, ModelDir) else model
        cache = self.cache_path(model_id) if model_id is not None else path_cache_dir(self.cache_dir, where)
        prepare_cache(cache, model)
        return cache

    def exists(self, model_id: str) -> bool:
        return (self.path(model_id) / CONFIG_NAME).is_file()

    def get(self, model_id: str) -> ModelInfo:
        path = self.path(model_id)
        if not (path / CONFIG_NAME).is_file():
            raise MnnEngineError("model_not_found", f"no model {model_id!r} in {self.models_dir}", param="model")
        return self._info(model_id, path)

    def _info(self, model_id: str, path: Path) -> ModelInfo:
        files = _model_files(path)
        previous = self.previous_path(model_id)
        kept = None
        if (previous / CONFIG_NAME).is_file():
            source = read_source(previous) or {}
            kept = {"size_bytes": sum(f.stat().st_size for f in _model_files(previous)),
                    "revision": source.get("commit"), "path": str(previous)}
        reading = _fresh_reading(path / CONFIG_NAME)
        try:
            is_visual = reading.is_visual if reading else bool(read_config(path / CONFIG_NAME).get("is_visual", False))
        except MnnEngineError:
            is_visual = False
        return ModelInfo(
            id=model_id,
            name=display_name(path, model_id),
            path=str(path),
            size_bytes=sum(f.stat().st_size for f in files),
            files=tuple(str(f.relative_to(path)) for f in files),
            is_visual=is_visual,
            created=path.stat().st_mtime,
            source={k: v for k, v in (read_source(path) or {}).items() if k != "files"} or None,
            previous=kept,
        )

    def list(self) -> list[ModelInfo]:
        """Every complete model, by ID."""
        if not self.models_dir.is_dir():
            return []
        self._remove_stale_imports()
        out = []
        for path in sorted(self.models_dir.iterdir()):
            if path.name.startswith(".") or not (path / CONFIG_NAME).is_file():
                continue
            with contextlib.suppress(MnnEngineError, OSError):
                read_config(path / CONFIG_NAME)  # a model whose config is broken is not listed
                out.append(self._info(path.name, path))
        return out

    def resolve(self, model: str | os.PathLike[str]) -> tuple[str | None, Path]:
        """A store ID or a model directory/config path -> (ID or None, directory)."""
        text = os.fspath(model)
        if isinstance(model, str) and "/" not in text and text not in (".", ".."):
            with contextlib.suppress(MnnEngineError):
                if self.exists(text):
                    return text, self.path(text)
            with contextlib.suppress(MnnEngineError):  # a catalog name: qwen3-0.6b is stored as qwen3-0-6b
                slug = model_id_from_name(text)
                if not Path(text).exists() and self.exists(slug):
                    return slug, self.path(slug)
        try:
            path = resolve_config_path(text).parent
        except MnnEngineError as exc:
            if not Path(text).expanduser().exists() and "/" not in text:
                raise MnnEngineError("model_not_found", f"{text!r} is neither a model in the store nor a model "
                                     "directory: `python -m mnn_engine models list` shows the store",
                                     param="model") from exc
            raise
        with contextlib.suppress(ValueError):
            relative = path.resolve().relative_to(self.models_dir.resolve())
            if len(relative.parts) == 1:
                return relative.parts[0], path
        return None, path

    # ---------------------------------------------------------------- locks
    def _lock(self, model_id: str, exclusive: bool) -> ModelLock:
        return ModelLock(self.root / "locks" / f"{check_model_id(model_id)}.lock", exclusive)

    def hold(self, model_id: str) -> ModelLock:
        """A shared lock on a model for as long as it is loaded: other
        processes cannot delete, rename, replace it or clear its cache
        (``model_in_use`` while one of them is changing it)."""
        try:
            return self._lock(model_id, exclusive=False)
        except OSError as exc:
            raise MnnEngineError("model_in_use", f"{model_id!r} is being changed by another process; try again",
                                 param="model") from exc

    @contextlib.contextmanager
    def changing(self, model_id: str, action: str, busy_code: str = "model_in_use") -> Iterator[None]:
        """An exclusive lock on a model for a change, refused at once while
        it is loaded here or in another process, or being changed."""
        if self.in_use(model_id):
            raise MnnEngineError("model_in_use", f"cannot {action} {model_id!r}: it is loaded; unload it first",
                                 param="model")
        try:
            lock = self._lock(model_id, exclusive=True)
        except OSError as exc:
            raise MnnEngineError(busy_code, f"cannot {action} {model_id!r}: another process has it loaded "
                                            "or is changing it", param="model") from exc
        with lock:
            yield

    def import_model(
        self,
        source: str | os.PathLike[str],
        *,
        model_id: str | None = None,
        replace: bool = False,
        progress: ProgressCallback | None = None,
    ) -> ModelInfo:
        """Validate ``source`` (a model directory or its config.json) and copy it
        into the store under ``model_id`` (default: its directory name, slugged)."""
        config_path = resolve_config_path(source)
        src = config_path.parent
        validate_model_dir(src)
        new_id = check_model_id(model_id) if model_id is not None else model_id_from_name(src.resolve().name)
        if self.exists(new_id) and not replace:
            raise _exists(new_id)
        with self.changing(new_id, "import", busy_code="model_exists" if not replace else "model_in_use"):
            return self._import_locked(src, new_id, replace, progress)

    def _import_locked(self, src: Path, new_id: str, replace: bool, progress: ProgressCallback | None) -> ModelInfo:
        final = self.models_dir / new_id
        if (final / CONFIG_NAME).is_file() and not replace:
            raise _exists(new_id)
        if final.exists() and src.resolve() == final.resolve():
            raise invalid("source", "the source is the stored model itself")
        self.models_dir.mkdir(parents=True, exist_ok=True)
        self._remove_stale_imports()
        staging = self.models_dir / f"{_IMPORT_PREFIX}{new_id}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        try:
            self._copy_tree(src, staging, progress)
            config = validate_model_dir(staging, check_contents=False)
            staged_config = staging / CONFIG_NAME
            check_in_child(staged_config, model_files(staged_config, config), {})
            if final.exists():
                trash = self.models_dir / f"{_TRASH_PREFIX}{new_id}-{uuid.uuid4().hex[:8]}"
                final.rename(trash)
                staging.rename(final)
                shutil.rmtree(trash, ignore_errors=True)
                shutil.rmtree(self.cache_dir / new_id, ignore_errors=True)
            else:
                staging.rename(final)
        finally:
            if staging.exists():
                shutil.rmtree(staging, ignore_errors=True)
        return self._info(new_id, final)

    @staticmethod
    def _copy_tree(src: Path, dst: Path, progress: ProgressCallback | None) -> None:
        real_src = src.resolve()
        files = []
        for path in _tree_files(src):
            real = path.resolve()
            if real_src not in real.parents:
                raise MnnEngineError("invalid_model", f"{path.relative_to(src)} links outside the model directory",
                                     param=str(path.relative_to(src)))
            files.append(path)
        total = sum(p.stat().st_size for p in files)
        copied = 0
        dst.mkdir(parents=True)
        if progress:
            progress(0, total, "")
        for path in files:
            rel = path.relative_to(src)
            target = dst / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            with open(path, "rb") as reader, open(target, "wb") as writer:
                while chunk := reader.read(4 << 20):
                    writer.write(chunk)
                    copied += len(chunk)
                    if progress:
                        progress(copied, total, str(rel))
                writer.flush()
                os.fsync(writer.fileno())
        if progress:
            progress(total, total, "")

    def _remove_stale_imports(self) -> None:
        """Remove the leftovers of imports whose process is gone."""
        if not self.models_dir.is_dir():
            return
        for path in self.models_dir.iterdir():
            if path.name.startswith(_TRASH_PREFIX):
                shutil.rmtree(path, ignore_errors=True)
            elif path.name.startswith(_IMPORT_PREFIX):
                match = re.search(r"-(\d+)-[0-9a-f]{8}$", path.name)
                if match is None or not _pid_alive(int(match.group(1))):
                    shutil.rmtree(path, ignore_errors=True)

    def rename(self, old_id: str, new_id: str) -> ModelInfo:
        self.get(old_id)
        check_model_id(new_id)
        with self.changing(old_id, "rename"), self.changing(new_id, "rename to", busy_code="model_exists"):
            info = self.get(old_id)
            if self.exists(new_id):
                raise MnnEngineError("model_exists", f"a model {new_id!r} is already in the store", param="new_id")
            target = self.models_dir / new_id
            Path(info.path).rename(target)
            if self.previous_path(old_id).exists():
                self.previous_path(old_id).rename(self.previous_path(new_id))
            for kept in (self.preset_path, self.options_path):  # a model's settings follow it
                if kept(old_id).exists():
                    kept(old_id).replace(kept(new_id))
            adapters = self.root / ADAPTERS_DIR
            if (adapters / old_id).is_dir():  # and its adapters
                (adapters / old_id).rename(adapters / new_id)
            old_cache = self.cache_dir / old_id
            if old_cache.exists():
                shutil.rmtree(old_cache, ignore_errors=True)
            return self._info(new_id, target)

    def delete(self, model_id: str, *, force: bool = False) -> None:
        """Delete a model; one with adapters only with ``force`` (they go too)."""
        self.get(model_id)
        with self.changing(model_id, "delete"):
            self._adapters_of_deleted(model_id, force)
            info = self.get(model_id)
            trash = self.models_dir / f"{_TRASH_PREFIX}{model_id}-{uuid.uuid4().hex[:8]}"
            Path(info.path).rename(trash)  # disappears from listings at once
            shutil.rmtree(trash, ignore_errors=True)
            shutil.rmtree(self.cache_dir / model_id, ignore_errors=True)
            shutil.rmtree(self.previous_path(model_id), ignore_errors=True)
            self.preset_path(model_id).unlink(missing_ok=True)
            self.options_path(model_id).unlink(missing_ok=True)

    def pull(self, spec: str, *, model_id: str | None = None, revision: str | None = None,
             source: str | None = None, update: bool = False, progress: ProgressCallback | None = None,
             base: str | None = None, **options: Any) -> Any:
        """Download a model into the store: a catalog name (``qwen3-0.6b``),
        ``hf:ORG/NAME``, ``modelscope:ORG/NAME`` or a manifest URL. Resumes,
        verifies every file and activates atomically; ``update`` fetches a
        newer revision of a stored model and keeps the old one for
        ``rollback``. With ``base``: a LoRA adapter export, imported over that
        stored model as ``model_id`` (returns its ``AdapterInfo``). See
        ``mnn_engine.store.pull``."""
        if base is not None:
            return pull_adapter(self, spec, base, name=model_id, revision=revision, source=source, update=update,
                                progress=progress, **options)
        return pull(self, spec, model_id=model_id, revision=revision, source=source, update=update,
                    progress=progress, **options)

    def rollback(self, model_id: str) -> ModelInfo:
        """Swap a model with the version its last update replaced."""
        return rollback(self, model_id)

    # ---------------------------------------------------------------- caches
    def cache_info(self, model_id: str | None = None) -> dict[str, int]:
        """Cache size in bytes, per model ID (one model, or every model with a cache)."""
        if model_id is not None:
            self.get(model_id)
            return {model_id: _dir_size(self.cache_path(model_id))}
        if not self.cache_dir.is_dir():
            return {}
        return {p.name: _dir_size(p) for p in sorted(self.cache_dir.iterdir()) if p.is_dir()}

    def clear_cache(self, model_id: str | None = None) -> int:
        """Delete caches (one model's or all); returns the bytes freed. A loaded
        model's cache is refused; the next load rebuilds it."""
        targets = [model_id] if model_id is not None else list(self.cache_info())
        with contextlib.ExitStack() as locks:
            for target in targets:
                locks.enter_context(self.changing(target, "clear the cache of"))
            freed = 0
            for target in targets:
                path = self.cache_path(target)
                freed += _dir_size(path)
                shutil.rmtree(path, ignore_errors=True)
        return freed

    # ---------------------------------------------------------------- presets
    def preset_path(self, model_id: str) -> Path:
        return self.root / "presets" / f"{check_model_id(model_id)}.json"

    def preset(self, model_id: str) -> dict[str, Any] | None:
        """The load options saved by ``bench --tune`` for this model, if any."""
        try:
            data = json.loads(self.preset_path(model_id).read_text())
        except (OSError, ValueError):
            return None
        options = data.get("options") if isinstance(data, dict) else None
        return options if isinstance(options, dict) else None

    def save_preset(self, model_id: str, options: dict[str, Any], measurements: dict[str, Any]) -> Path:
        self.get(model_id)
        path = self.preset_path(model_id)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"options": options, "measured": measurements, "saved": time.time()}, indent=2))
        tmp.replace(path)
        return path

    # ---------------------------------------------------------------- per-model options
    def options_path(self, model_id: str) -> Path:
        return self.root / "options" / f"{check_model_id(model_id)}.json"

    def model_options(self, model_id: str) -> dict[str, Any]:
        """The load options set for this model with ``models config`` ({} when none)."""
        try:
            data = json.loads(self.options_path(model_id).read_text())
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def save_model_options(self, model_id: str, options: dict[str, Any]) -> Path:
        """Replace this model's options (an empty dict removes the file)."""
        self.get(model_id)
        path = self.options_path(model_id)
        if not options:
            path.unlink(missing_ok=True)
            return path
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(options, indent=2, sort_keys=True))
        tmp.replace(path)
        return path

    def touch(self, model_id: str) -> None:
        """Mark a model as the last one loaded (for ``serve`` without MODEL)."""
        self.root.mkdir(parents=True, exist_ok=True)
        (self.root / "last-model").write_text(f"{model_id}\n{time.time()}\n")

    def last_loaded(self) -> str | None:
        try:
            model_id = (self.root / "last-model").read_text().split()[0]
        except (OSError, IndexError):
            return None
        return model_id if self.exists(model_id) else None
