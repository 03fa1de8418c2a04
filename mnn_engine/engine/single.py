"""One engine's model for every request (``serve MODEL --no-switch`` and
``Engine.start_server``): the served-models side of a server with nothing to
schedule. Nothing is loaded or unloaded here (the engine's owner does that),
keep-alive does not apply, and the engine itself records the server's state.
``engine.pool.ModelPool`` is the other serving mode; the server sees both as
``engine.protocol.ServedModels``."""

from __future__ import annotations

import threading
from typing import Any

from ..checks import string
from ..errors import MnnEngineError
from ..store.layout import ModelInfo, served_name
from .engine import Engine
from .listing import NEVER, ModelFacts, model_entry
from .naming import model_not_found, names
from .protocol import ACQUIRE_TIMEOUT_S
from .roster import ModelRoster


class SingleLease:
    """A request's hold on the one model: counted, nothing else (it never expires)."""

    def __init__(self, served: SingleModel) -> None:
        self._served, self.engine, self.name = served, served.engine, served.default_name
        self._released = False

    def release(self, keep_alive: Any = ...) -> None:
        """The request is done (``keep_alive`` does not apply to this model). Idempotent."""
        if not self._released:
            self._released = True
            self._served.lease_ended()


class SingleModel:
    """See the module's docstring: ``engine``'s loaded model, as it is when
    this is made, answers every request."""

    switching = False
    max_loaded = 1

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.events, self.store = engine.events, engine.store
        snap = engine.snapshot()["model"]
        self.model_id: str | None = snap.get("id")
        self.target: str = snap.get("path") or ""
        self.default_name: str = served_name(self.model_id, snap.get("path")) or "model"
        #: its facts, read once per version of its files (as the pool's)
        self.roster = ModelRoster(self.store)
        if self.model_id is None and self.target:
            self.roster.add(self.target)
        self._users = 0
        self._lock = threading.Lock()

    # ---------------------------------------------------------------- names and leases
    def resolve(self, asked: Any, *, strict: bool = True) -> str:
        """The one model, whatever ``asked`` names, unless ``strict`` (Ollama's
        routes: a name must name it, else ``model_not_found``)."""
        string(asked, "model", nullable=True)
        if strict and asked and not names(asked, self.default_name, self.model_id):
            raise model_not_found(asked)
        return self.default_name

    def try_acquire(self, name: str) -> SingleLease:
        """A lease on the one model (never blocks); ``name`` is what ``resolve`` answered."""
        if name != self.default_name:  # a name resolve never gives: a caller's mistake, not silently the model
            raise model_not_found(name)
        with self._lock:
            self._users += 1
        return SingleLease(self)

    def acquire(self, name: str, timeout: float = ACQUIRE_TIMEOUT_S) -> SingleLease:
        return self.try_acquire(name)

    def lease_ended(self) -> None:
        with self._lock:
            self._users = max(0, self._users - 1)

    def unload(self, name: str) -> None:
        """Nothing: the engine's owner unloads its model."""

    def close(self) -> None:
        """Nothing: the engine's owner closes it."""

    # ---------------------------------------------------------------- what the server shows
    @property
    def generating(self) -> bool:
        return self.engine.generating

    @property
    def generation_cancelled(self) -> bool:
        return self.engine.generation_cancelled

    def loaded_engines(self) -> list[tuple[str, Engine]]:
        return [(self.default_name, self.engine)] if self.engine.loaded else []

    def facts(self, name: str) -> ModelFacts:
        """The one model's facts (reads its files the first time: off the IOLoop)."""
        return self.roster.facts(self.resolve(name))

    def models(self) -> list[dict[str, Any]]:
        """The one model, or none once it failed and was unloaded (nothing is served)."""
        if not self.engine.loaded:
            return []
        try:
            return [self.model(self.default_name)]
        except MnnEngineError:
            return []  # deleted meanwhile, or broken: not served

    def model(self, name: str) -> dict[str, Any]:
        facts = self.facts(name)
        loaded = self.engine.loaded
        with self._lock:
            users = self._users
        return model_entry(facts, engine=self.engine if loaded else None, state="loaded" if loaded else "unloaded",
                           users=users, expires=NEVER, default=True, store=self.store, defaults={})

    def snapshot(self) -> dict[str, Any]:
        """The engine's own picture (/health), with the pool's ``loaded`` and ``loading`` fields."""
        snap = self.engine.snapshot()
        model = snap["model"]
        snap["loading"] = None
        snap["loaded"] = [{"name": self.default_name, "id": model["id"], "kind": model.get("kind"),
                           "context_length": model.get("context_length")}] if model["state"] == "loaded" else []
        return snap

    # ---------------------------------------------------------------- the server's lifecycle
    def require_ready_for_server(self) -> None:
        self.engine.require_model_for_server()

    def set_server_state(self, state: str, address: str | None = None) -> None:
        self.engine.set_server_state(state, address)

    def pull(self, spec: str, **options: Any) -> ModelInfo:
        """``Engine.pull`` (with the engine's events)."""
        return self.engine.pull(spec, **options)
