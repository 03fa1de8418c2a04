"""Which models a server serves, by name, and what each one is: the roster
both serving modes keep (``ModelPool`` over the whole store, ``SingleModel``
over one engine's model). It answers names (``resolve``), lists them
(``names``), says what to load for a name (``target``) and keeps each model's
facts and size, read from its files once per version of them (``facts``,
``size``). Scheduling (leases, loads, keep-alive, the memory budget) is the
pool's; nothing here loads a model.

A name is a store ID, the served name of a model directory outside the
store named when the server started (``add``: ``serve ./my-model``), or a
stored LoRA adapter's ``BASE_NAME`` (``store.adapters``: the pool loads
its base beneath it).
"""

from __future__ import annotations

import contextlib
import threading
from pathlib import Path

from ..errors import MnnEngineError
from ..hub import catalog
from ..runtime.model_files import CONFIG_NAME
from ..store.adapters import adapter_id, split_adapter_id
from ..store.layout import served_name
from ..store.models import ModelStore
from .listing import ModelFacts, adapter_facts, directory_bytes, facts_are_stale, read_facts
from .naming import model_not_found, names


class ModelRoster:
    """See the module's docstring. Reads the store and the models' files:
    call it off the IOLoop (``size`` of a name already read is a lookup)."""

    def __init__(self, store: ModelStore) -> None:
        self.store = store
        self._directories: dict[str, Path] = {}  # served name -> a model directory outside the store
        self._facts: dict[str, ModelFacts] = {}
        self._sizes: dict[str, int] = {}
        #: a leaf lock: never held while taking another
        self._lock = threading.Lock()

    def add(self, model: str) -> str:
        """Serve ``model`` (a store ID or a model directory) too; its served name."""
        model_id, path = self.store.resolve(model)
        name = served_name(model_id, str(path))
        assert name is not None
        if model_id is None:
            with self._lock:
                self._directories[name] = path
        return name

    def store_ids(self) -> list[str]:
        """The store's models (directories with a config), by ID."""
        models = self.store.models_dir
        try:
            found = sorted(p.name for p in models.iterdir() if not p.name.startswith("."))
        except OSError:
            return []
        return [n for n in found if (models / n / CONFIG_NAME).is_file()]

    def names(self) -> list[str]:
        """Every served name: the store's models, their adapters and the directories added."""
        with self._lock:
            directories = list(self._directories)
        ids = self.store_ids()
        adapters = [a.id for a in self.store.adapters() if a.base in ids]
        return sorted({*ids, *adapters, *directories})

    def adapter_of(self, name: str) -> tuple[str, str] | None:
        """(base, adapter) when ``name`` is a stored adapter's served name, else None."""
        pair = self.store.find_adapter(name)
        return pair if pair is not None and adapter_id(*pair) == name else None  # a served name: exactly it

    def target(self, name: str) -> tuple[str | None, str]:
        """What ``Engine.load`` takes for ``name``: (its store ID or None, the ID or its directory)."""
        with self._lock:
            path = self._directories.get(name)
        return (None, str(path)) if path is not None else (name, name)

    def resolve(self, asked: str) -> str:
        """The served name ``asked`` names: a store ID or a name that slugs to
        one (``Qwen3-0.6B``, Ollama's ``qwen3:0.6b`` and ``tiny:latest``), or
        an added directory's name. ``model_not_found`` for anything else, with
        the pull command for a catalog name not pulled yet: a request never
        downloads."""
        with self._lock:
            directories = list(self._directories)
        for name in directories:  # named at start: before a store model of a similar name
            if names(asked, name):
                return name
        pair = split_adapter_id(asked)  # BASE_NAME: no store ID holds the separator
        if pair is not None:
            with contextlib.suppress(MnnEngineError):  # else a name such as my_model slugs to a model's ID
                base = self.resolve(pair[0])
                self.store.get_adapter(base, pair[1])
                return adapter_id(base, pair[1])
        for model_id in self.store_ids():
            if names(asked, model_id):
                return model_id
        entry = catalog.find(asked.removesuffix(":latest").replace(":", "-"))
        if entry is not None:
            raise MnnEngineError("model_not_found", f'model "{asked}" is not in the store; pull it first (POST '
                                 f"/api/pull, or python -m mnn_engine models pull {entry.name})", param="model")
        raise model_not_found(asked)

    def facts(self, name: str) -> ModelFacts:
        """What ``name`` is, from its files: read once, again after they were
        replaced (``pull --update``, ``import --replace``)."""
        with self._lock:
            facts = self._facts.get(name)
        if facts is None or facts_are_stale(self.store, facts):
            pair = self.adapter_of(name)
            if pair is not None:
                facts = adapter_facts(self.store, self.facts(pair[0]), pair[1])
            else:
                model_id, target = self.target(name)
                facts = read_facts(self.store, name, model_id, target)
            with self._lock:
                self._facts[name], self._sizes[name] = facts, facts.size_bytes
        return facts

    def measured(self, name: str, cost: int) -> None:
        """What loading ``name`` really cost (an adapter's RSS growth): its size from now on."""
        if cost > 0:
            with self._lock:
                self._sizes[name] = cost

    def size(self, name: str) -> int:
        """``name``'s weights on disk, in bytes (read once; 0 when unreadable:
        its load reports what is wrong)."""
        with self._lock:
            size = self._sizes.get(name)
        if size is None:
            model_id, target = self.target(name)
            pair = self.adapter_of(name)
            size = 0
            with contextlib.suppress(MnnEngineError, OSError):
                size = self.store.get_adapter(*pair).size_bytes if pair is not None else \
                    self.store.get(model_id).size_bytes if model_id is not None else directory_bytes(Path(target))
            if size:  # unreadable now: asked again next time
                with self._lock:
                    self._sizes[name] = size
        return size
