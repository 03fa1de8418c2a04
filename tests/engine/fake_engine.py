"""An engine for the pool's scheduling suite: ``Engine``'s interface as ``ModelPool`` uses it, after
mnn_engine/engine/engine.py, without a model's weights or MNN.

It behaves as ``Engine`` does where the pool can tell: ``load`` resolves the target in the store first
(an unknown one is the store's ``not_found`` before anything happens), blocks its caller for the load,
emits the same ``model`` events (``loading``, then ``loaded``, or ``unloaded`` with the error's code),
and raises ``model_load_failed`` for a target named in ``failing``; ``unload`` and ``close`` emit
``unloaded`` with their reason; ``llm`` is ``model_not_loaded`` with nothing loaded; ``load_adapter``
reads its base's ``llm`` (``model_not_loaded`` under an unloaded base) and the store's adapter
(``model_not_found``) first, and its model is ``BASE_NAME``. tests/engine/test_pool_scheduling.py runs
the same cases on it and on the real ``Engine``."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace
from typing import Any

from mnn_engine import MnnEngineError, ModelStore
from mnn_engine.engine.events import EventStream

DEFAULT_CONTEXT = 2048


class FakeEngine:
    def __init__(self, store: ModelStore, events: EventStream, *, load_seconds: float = 0.0,
                 failing: frozenset[str] = frozenset()) -> None:
        self.store, self.events = store, events
        self.load_seconds, self.failing = load_seconds, failing
        self._lock = threading.Lock()
        self._model: tuple[str | None, str] | None = None
        self.loads = 0

    # what the pool reads
    @property
    def loaded(self) -> bool:
        return self._model is not None

    @property
    def llm(self) -> Any:
        if self._model is None:
            raise MnnEngineError("model_not_loaded", "no model is loaded")
        return SimpleNamespace(context_length=DEFAULT_CONTEXT, adapter_bytes=0)

    @property
    def active_model_id(self) -> str | None:
        return self._model[0] if self._model is not None else None

    generating = False
    generation_cancelled = False

    def snapshot(self) -> dict[str, Any]:
        model_id, path = self._model or (None, None)
        state = "loaded" if self._model else "unloaded"
        return {"engine": "ready" if self._model else "idle",
                "model": {"state": state, "id": model_id, "path": path, "options": None},
                "server": {"state": "stopped", "address": None},
                "generation": {"state": "idle", "started": None}, "last_error": None}

    # what the pool calls
    def load(self, model: str, options: Any = None) -> None:
        model_id, path = self.store.resolve(model)  # not_found before anything, as Engine.load
        with self._lock:
            self.events.emit("model", "loading", model_id=model_id)
            time.sleep(self.load_seconds)
            if model in self.failing or model_id in self.failing:
                error = MnnEngineError("model_load_failed", f"MNN could not load {path}")
                self.events.emit("model", "unloaded", model_id=model_id, error=error.code)
                raise error
            self._model = (model_id, str(path))
            self.loads += 1
            self.events.emit("model", "loaded", model_id=model_id)

    def load_adapter(self, base: Any, adapter: str) -> None:
        base.llm  # noqa: B018 - model_not_loaded under an unloaded base, as Engine.load_adapter
        base_id = base.active_model_id
        info = self.store.get_adapter(base_id, adapter)  # model_not_found before anything
        with self._lock:
            self.events.emit("model", "loading", model_id=info.id)
            time.sleep(self.load_seconds)
            self._model = (info.id, info.path)
            self.loads += 1
            self.events.emit("model", "loaded", model_id=info.id)

    def unload(self, reason: str = "unloaded") -> None:
        with self._lock:
            if self._model is None:
                return  # as Engine.unload: nothing loaded, nothing to do
            model_id = self._model[0]
            self._model = None
            self.events.emit("model", "unloading", model_id=model_id, reason=reason)
            self.events.emit("model", "unloaded", model_id=model_id, reason=reason)

    def close(self) -> None:
        if self._model is not None:
            self.unload("closed")
