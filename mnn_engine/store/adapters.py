"""LoRA adapters in the store, each under the model it was exported over::

    adapters/<base>/<name>/   lora.mnn, adapter.json (its record), adapter_config.json (peft's, if given),
                              lora.export.mnn (the graph as exported, once its scale was changed)
    adapters/<base>/.import-* an import in progress (never listed)
    locks/<base>_<name>.lock  the adapter's lock (shared while loaded, exclusive while changed)

A served adapter's name is ``<base>_<name>`` (``SEPARATOR``): store IDs are
``[a-z0-9-]`` and never hold an underscore, so the name is never a model's
own; Ollama's name rules take it (a model part is letters, digits, ``_``,
``-`` and ``.``: ``+`` would be refused), it needs no escaping in a URL
path (``/v1/models/tiny_tone``) or JSON, and ``:`` stays Ollama's tag
(``qwen3:0.6b`` names the model ``qwen3-0-6b``, as before).

An import checks the adapter against its base before copying it
(``runtime.adapter_files``: the graph's structure, the base's weight extent,
and the base weight file's SHA-256 when the adapter records it) and renames
the copy into place, so a crash mid-copy leaves nothing that lists.
``ModelStore`` takes these methods (``AdapterShelf``); deleting a model with
adapters deletes them only when asked (``force``).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ..checks import invalid, is_int, is_number, number
from ..errors import MnnEngineError
from ..runtime.adapter_files import (
    ADAPTER_GRAPH,
    ADAPTER_MANIFEST,
    PEFT_CONFIG,
    AdapterDir,
    read_adapter_dir,
    rescaled_graph,
)
from ..runtime.mnn_graph import GraphError
from ..runtime.model_files import ModelDir
from .layout import ModelLock, check_model_id, model_id_from_name

SEPARATOR = "_"
ADAPTERS_DIR = "adapters"
_IMPORT_PREFIX = ".import-"
#: the graph as exported, kept beside a rescaled lora.mnn (every scale is made from it, 0 included)
EXPORTED_GRAPH = "lora.export.mnn"
#: the strengths ``models config BASE_NAME --scale`` takes (0: the base's own output)
MAX_SCALE = 100.0


@dataclass(frozen=True)
class AdapterInfo:
    """An adapter in the store."""

    base: str
    name: str
    path: str
    size_bytes: int
    created: float
    rank: int | None = None
    scale: float | None = None

    @property
    def id(self) -> str:
        """Its served name: ``<base>_<name>``."""
        return adapter_id(self.base, self.name)

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, **asdict(self)}


def adapter_id(base: str, name: str) -> str:
    return f"{base}{SEPARATOR}{name}"


def split_adapter_id(text: str) -> tuple[str, str] | None:
    """(base, adapter) of a served adapter name, slugged as store IDs are
    (``Qwen3-0.6B_Tone`` -> ``qwen3-0-6b``, ``tone``); None without the separator."""
    base, sep, name = text.strip().removesuffix(":latest").partition(SEPARATOR)
    if not sep or not base or not name:
        return None
    try:
        return model_id_from_name(base), model_id_from_name(name)
    except MnnEngineError:
        return None


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


class AdapterShelf:
    """The store's adapter methods (mixed into ``ModelStore``)."""

    root: Path
    in_use: Callable[[str], bool]
    get: Callable[..., Any]
    path: Callable[[str], Path]
    model_dir: Callable[[Path], ModelDir]

    def adapter_path(self, base: str, name: str) -> Path:
        return self.root / ADAPTERS_DIR / check_model_id(base) / check_model_id(name)

    def adapters(self, base: str | None = None) -> list[AdapterInfo]:
        """Every adapter in the store (of ``base`` only, when given), by base and name."""
        top = self.root / ADAPTERS_DIR
        bases = [base] if base is not None else sorted(p.name for p in top.iterdir()) if top.is_dir() else []
        out = []
        for base_id in bases:
            shelf = top / base_id
            if base_id.startswith(".") or not shelf.is_dir():
                continue
            for path in sorted(shelf.iterdir()):
                if not path.name.startswith(".") and (path / ADAPTER_GRAPH).is_file():
                    with contextlib.suppress(OSError, MnnEngineError):
                        out.append(self._adapter_info(base_id, path))
        return out

    def find_adapter(self, served: str) -> tuple[str, str] | None:
        """(base, adapter) when ``served`` names a stored adapter (``BASE_NAME``, both slugged as store IDs
        are), else None."""
        pair = split_adapter_id(served)
        if pair is None:
            return None
        try:
            self.get_adapter(*pair)
        except MnnEngineError:
            return None
        return pair

    def get_adapter(self, base: str, name: str) -> AdapterInfo:
        path = self.adapter_path(base, name)
        if not (path / ADAPTER_GRAPH).is_file():
            raise MnnEngineError("model_not_found", f"no adapter {adapter_id(base, name)!r} in the store "
                                 f"(python -m mnn_engine models list shows them)", param="model")
        return self._adapter_info(base, path)

    def _adapter_info(self, base: str, path: Path) -> AdapterInfo:
        record: dict[str, Any] = {}
        with contextlib.suppress(OSError, ValueError):
            loaded = json.loads((path / ADAPTER_MANIFEST).read_text(encoding="utf-8"))
            record = loaded if isinstance(loaded, dict) else {}
        size = sum(f.stat().st_size for f in path.iterdir() if f.is_file())
        rank, scale = record.get("rank"), record.get("scale")
        return AdapterInfo(base, path.name, str(path), size, path.stat().st_mtime, rank if is_int(rank) else None,
                           float(scale) if is_number(scale) else None)

    def read_adapter(self, base: str, name: str) -> AdapterDir:
        """A stored adapter, read and checked against its stored base (for a load)."""
        self.get_adapter(base, name)
        return read_adapter_dir(self.adapter_path(base, name), self.model_dir(self.path(base)))

    # ---------------------------------------------------------------- locks
    def _adapter_lock(self, base: str, name: str, exclusive: bool) -> ModelLock:
        return ModelLock(self.root / "locks" / f"{adapter_id(check_model_id(base), check_model_id(name))}.lock",
                         exclusive)

    def hold_adapter(self, base: str, name: str) -> ModelLock:
        """A shared lock on an adapter while it is loaded (other processes cannot delete or replace it)."""
        try:
            return self._adapter_lock(base, name, exclusive=False)
        except OSError as exc:
            raise MnnEngineError("model_in_use", f"{adapter_id(base, name)!r} is being changed by another "
                                 "process; try again", param="model") from exc

    @contextlib.contextmanager
    def _changing_adapter(self, base: str, name: str, action: str) -> Iterator[None]:
        if self.in_use(adapter_id(base, name)):
            raise MnnEngineError("model_in_use", f"cannot {action} {adapter_id(base, name)!r}: it is loaded; "
                                 "unload it first", param="model")
        try:
            lock = self._adapter_lock(base, name, exclusive=True)
        except OSError as exc:
            raise MnnEngineError("model_in_use", f"cannot {action} {adapter_id(base, name)!r}: another process "
                                 "has it loaded or is changing it", param="model") from exc
        with lock:
            yield

    # ---------------------------------------------------------------- changes
    def import_adapter(self, source: str | os.PathLike[str], base: str, *, name: str | None = None,
                       replace: bool = False) -> AdapterInfo:
        """Check ``source`` (an adapter directory, or its ``lora.mnn``) against
        the stored model ``base`` and copy it into the store as ``name``
        (default: its directory's name, slugged). ``invalid_model`` when it is
        damaged or was exported over another model; ``model_exists`` when the
        name is taken (``replace`` replaces it)."""
        self.get(base)
        reading = read_adapter_dir(source, self.model_dir(self.path(base)))
        new = check_model_id(name) if name is not None else model_id_from_name(
            reading.path.resolve().name if reading.graph.name == ADAPTER_GRAPH else reading.graph.stem)
        recorded = reading.manifest.get("base_weight_sha256")
        if isinstance(recorded, str):
            actual = _sha256(self.model_dir(self.path(base)).files["llm_weight"])
            if recorded != actual:
                raise MnnEngineError("invalid_model", f"adapter {reading.path}: it was exported over a model whose "
                                     f"weights differ from {base!r}'s (its adapter.json records another weight "
                                     "file)", param="adapter")
        final = self.adapter_path(base, new)
        if final.exists() and not replace:
            raise MnnEngineError("model_exists", f"an adapter {adapter_id(base, new)!r} is already in the store "
                                 "(replace it with --replace)", param="name")
        with self._changing_adapter(base, new, "import"):
            final.parent.mkdir(parents=True, exist_ok=True)
            staging = final.parent / f"{_IMPORT_PREFIX}{new}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
            try:
                staging.mkdir()
                shutil.copyfile(reading.graph, staging / ADAPTER_GRAPH)
                if (reading.path / PEFT_CONFIG).is_file():
                    shutil.copyfile(reading.path / PEFT_CONFIG, staging / PEFT_CONFIG)
                record = {**reading.manifest, "base": base, "imported": time.time(), "source": str(reading.path),
                          "rank": reading.rank, "scale": reading.scale, "export_scale": reading.scale,
                          "factor_weights": reading.parameters}
                (staging / ADAPTER_MANIFEST).write_text(json.dumps(record, indent=2) + "\n")
                if final.exists():
                    trash = final.parent / f".trash-{new}-{uuid.uuid4().hex[:8]}"
                    final.rename(trash)
                    staging.rename(final)
                    shutil.rmtree(trash, ignore_errors=True)
                else:
                    staging.rename(final)
            finally:
                if staging.exists():
                    shutil.rmtree(staging, ignore_errors=True)
        return self._adapter_info(base, final)

    def set_adapter_scale(self, base: str, name: str, scale: float) -> AdapterInfo:
        """Set an adapter's strength (``lora_alpha / r`` at export: 0 gives the
        base's own output, 2x the export's doubles the adapter's term). The
        factors live inside the graph, so its ``B`` factors are rescaled from
        the graph as exported (kept as ``lora.export.mnn``); MNN has no
        runtime scale. Refused while the adapter is loaded, and for an adapter
        whose export scale is not recorded (peft's adapter_config.json or
        adapter.json says it)."""
        number(scale, "scale", low=0, high=MAX_SCALE)
        self.get_adapter(base, name)
        with self._changing_adapter(base, name, "rescale"):
            path = self.adapter_path(base, name)
            record = json.loads((path / ADAPTER_MANIFEST).read_text(encoding="utf-8"))
            exported = record.get("export_scale", record.get("scale"))
            if not is_number(exported) or exported <= 0:
                raise invalid("scale", f"{adapter_id(base, name)!r} does not record the scale it was exported with "
                                       "(lora_alpha / r): import it with peft's adapter_config.json beside lora.mnn")
            original = path / EXPORTED_GRAPH
            if not original.is_file():
                shutil.copyfile(path / ADAPTER_GRAPH, original)
            try:
                data = rescaled_graph(original.read_bytes(), float(scale) / float(exported))
            except GraphError as exc:
                raise MnnEngineError("invalid_model", f"adapter {path}: {exc}", param="adapter") from exc
            staged = path / f".{ADAPTER_GRAPH}.{uuid.uuid4().hex[:8]}"
            staged.write_bytes(data)
            staged.replace(path / ADAPTER_GRAPH)
            record.update(scale=float(scale), export_scale=float(exported))
            (path / ADAPTER_MANIFEST).write_text(json.dumps(record, indent=2) + "\n")
        return self._adapter_info(base, path)

    def delete_adapter(self, base: str, name: str) -> None:
        self.get_adapter(base, name)
        with self._changing_adapter(base, name, "delete"):
            path = self.adapter_path(base, name)
            trash = path.parent / f".trash-{name}-{uuid.uuid4().hex[:8]}"
            path.rename(trash)  # gone from listings at once
            shutil.rmtree(trash, ignore_errors=True)
            with contextlib.suppress(OSError):
                path.parent.rmdir()  # the base's last adapter

    def rename_adapter(self, base: str, name: str, new_name: str) -> AdapterInfo:
        self.get_adapter(base, name)
        new = check_model_id(new_name)
        with self._changing_adapter(base, name, "rename"), self._changing_adapter(base, new, "rename to"):
            target = self.adapter_path(base, new)
            if target.exists():
                raise MnnEngineError("model_exists", f"an adapter {adapter_id(base, new)!r} is already in the store",
                                     param="new_id")
            self.adapter_path(base, name).rename(target)
            return self._adapter_info(base, target)

    def _adapters_of_deleted(self, base: str, force: bool) -> None:
        """Before ``base`` is deleted: its adapters go too when ``force``, else it is refused."""
        mine = self.adapters(base)
        if mine and not force:
            raise invalid("force", f"{base!r} has {len(mine)} adapter(s) ({', '.join(a.id for a in mine)}): "
                                   "delete them first, or delete with --force to delete them too")
        for adapter in mine:
            self.delete_adapter(base, adapter.name)
