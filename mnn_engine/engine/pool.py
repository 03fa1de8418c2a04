"""The models a server serves: the whole store by name, loaded on demand and
unloaded when idle, within the device's memory (``serve``). The other serving
mode, one engine's model for every request (``serve MODEL --no-switch`` and
``Engine.start_server``), is ``engine.single.SingleModel``; what a model is
and how it is listed is ``engine.listing``, shared by both.

A ``ModelPool`` owns one ``Engine`` per loaded model; all of them publish on
the pool's one ``EventStream`` (their events name their model). Its rules:

- a request names a model and leases it (``acquire``): a loaded model at
  once, else it is loaded here, one load at a time; a load that fails is that
  request's error and touches no other model;
- at most ``max_loaded`` models are loaded, and together they stay within
  ``memory_budget`` bytes (their weights' size in the store): a model that
  does not fit first unloads the least recently used idle ones; a model that
  is leased (a generation running or about to start, a tokenizer call) is
  never unloaded under it: the load waits for its lease to end instead;
- releasing a lease sets when the model expires: ``keep_alive`` seconds
  later (the request's, else the pool's; ``None``: never; 0: at once); the
  pool's reaper thread unloads expired idle models, and after each unload
  asks the allocator to give the memory back (``runtime.memory``);
- the model named when the pool was made (``serve MODEL``) is preloaded, is
  the default for requests that name none, and stays loaded until a request
  says otherwise or another model needs its room;
- a LoRA adapter (``BASE_NAME``) loads over its base, which is loaded (or
  leased) first and shared: an adapter counts in the memory budget at what
  its load measured (``Llm.adapter_bytes``; its file's size before) and not
  in ``max_loaded`` (it adds no weights); a base is never
  unloaded while one of its adapters is leased, and unloading a base unloads
  its idle adapters first; an adapter's keep-alive keeps its base at least
  as long; keep-alive 0 on an adapter unloads the adapter alone.

Loads, waits and unloads block: the server calls ``acquire`` and ``unload``
off its IOLoop (``try_acquire`` is the non-blocking fast path).
"""

from __future__ import annotations

import contextlib
import logging
import math
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ..checks import integer, invalid, is_number, string
from ..errors import MnnEngineError
from ..runtime.memory import give_back_memory, total_memory_bytes
from ..store.layout import ModelInfo
from ..store.models import ModelStore
from .engine import Engine, model_options, pull_with_events, server_launcher
from .events import EventStream
from .listing import NEVER, ModelFacts, model_entry
from .protocol import ACQUIRE_TIMEOUT_S
from .roster import ModelRoster
from .settings import DEFAULT_KEEP_ALIVE_S, MOST_LOADED, SMALL_DEVICE_BYTES, LoadOptions

log = logging.getLogger("mnn_engine.pool")

#: the share of RAM loaded models may take together (the rest: the KV caches, the system, other apps)
MEMORY_SHARE = 0.5


@dataclass(frozen=True)
class MemoryPlan:
    """How many models may be loaded at once, and why (printed by ``serve``)."""

    max_loaded: int
    memory_budget: int
    reason: str
    models: int = 0  # in the store when planned


def plan_memory(total_ram: int, model_sizes: list[int], max_loaded: int | None = None) -> MemoryPlan:
    """``max_loaded`` as asked, else decided from the RAM and the largest
    model: one under ``SMALL_DEVICE_BYTES``, else as many of the largest as
    fit in ``MEMORY_SHARE`` of the RAM, at most ``MOST_LOADED``."""
    count = len(model_sizes)
    budget = int(total_ram * MEMORY_SHARE) if total_ram else 0
    ram = f"{total_ram / 2**30:.1f} GiB of RAM" if total_ram else "RAM unknown"
    if max_loaded is not None:
        integer(max_loaded, "max_loaded", low=1)
        return MemoryPlan(max_loaded, budget, f"--max-loaded {max_loaded} ({ram})", count)
    if total_ram and total_ram < SMALL_DEVICE_BYTES:
        return MemoryPlan(1, budget, f"{ram}, under {SMALL_DEVICE_BYTES // 2**30} GiB: one model at a time", count)
    largest = max(model_sizes, default=0)
    fit = budget // largest if largest and budget else MOST_LOADED
    what = f"{fit} of the largest model ({largest / 2**20:.0f} MiB)" if largest else "any model"
    return MemoryPlan(max(1, min(MOST_LOADED, fit)), budget, f"{ram}: half of it holds {what}; at most {MOST_LOADED}",
                      count)


@dataclass
class _Slot:
    """A model the pool can serve, and its state."""

    name: str
    #: a LoRA adapter's slot: its base's served name (the base's slot is loaded beneath it)
    base: str | None = None
    engine: Engine | None = None
    state: str = "unloaded"  # loading, loaded, unloading
    users: int = 0
    last_used: float = 0.0
    expires: float = NEVER  # time.monotonic() deadline once idle
    keep_forever: bool = False  # the preloaded model: the default keep-alive does not apply
    # unload() while leased: the holders' releases with the default keep-alive leave it expired (Ollama sets a
    # request's own keep_alive when it acquires: a later request's lease clears this)
    unload_pending: bool = False


class Lease:
    """A model leased for one request: ``engine`` serves it until ``release``."""

    def __init__(self, pool: ModelPool, slot: _Slot, engine: Engine) -> None:
        self._pool, self._slot, self.engine = pool, slot, engine
        self.name = slot.name
        self._released = False

    def release(self, keep_alive: Any = ...) -> None:
        """The request is done; the model expires ``keep_alive`` seconds from
        now (``...``: the pool's default; ``None``: never). Idempotent."""
        if not self._released:
            self._released = True
            self._pool._release(self._slot, keep_alive)


class ModelPool:
    """See the module's docstring. ``defaults``: load options for models
    loaded on demand (``serve``'s flags); each model's preset and its own
    options (``models config``) go over them. ``engine_factory(store,
    events)`` makes the engine of each load (``Engine``; the scheduling suite
    passes a fake that behaves as it does, as Ollama's scheduler takes its
    ``newServerFn``)."""

    #: True: a request's ``model`` picks among the store's models (``SingleModel``: False)
    switching = True

    def __init__(self, store: ModelStore | None = None, *, defaults: Mapping[str, Any] | None = None,
                 max_loaded: int | None = None, keep_alive: float | None = DEFAULT_KEEP_ALIVE_S,
                 memory_budget: int | None = None, total_ram: int | None = None,
                 engine_factory: Callable[[ModelStore, EventStream], Engine] | None = None) -> None:
        self._engine_factory = engine_factory or (lambda store, events: Engine(store, events=events))
        self.store = store if store is not None else ModelStore()
        #: the served names and each model's facts (this pool schedules; the roster knows what is served)
        self.roster = ModelRoster(self.store)
        self.events = EventStream()
        self.defaults = dict(defaults or {})
        LoadOptions().updated(self.defaults)  # bad flags fail before anything loads
        self.keep_alive = check_keep_alive(keep_alive)
        ram = total_memory_bytes() if total_ram is None else total_ram
        self.plan = plan_memory(ram, [info.size_bytes for info in self.store.list()], max_loaded)
        self.max_loaded = self.plan.max_loaded
        self.memory_budget = memory_budget if memory_budget is not None else self.plan.memory_budget
        self.default_name: str | None = None
        self._slots: dict[str, _Slot] = {}
        self._cond = threading.Condition()
        #: one load or unload at a time; taken before _cond, never while holding it
        self._load_lock = threading.Lock()
        self._loading: dict[str, Any] | None = None
        self._last_error: dict[str, Any] | None = None
        self._server_state, self._server_address = "stopped", None
        self._closed = False
        self.store.in_use = self._in_use
        threading.Thread(target=self._reap, name="mnn-engine-reaper", daemon=True).start()

    # ---------------------------------------------------------------- names
    def _in_use(self, model_id: str) -> bool:
        with self._cond:
            busy = [s.name for s in self._slots.values() if s.state != "unloaded"]
        return any(self.roster.target(name)[0] == model_id for name in busy)

    def _slot_for(self, name: str) -> _Slot:
        pair = self.roster.adapter_of(name) if name not in self._slots else None
        with self._cond:
            slot = self._slots.get(name)
            if slot is None:
                slot = self._slots[name] = _Slot(name, base=pair[0] if pair else None)
            return slot

    def _adapters_of(self, slot: _Slot) -> list[_Slot]:
        """The loaded adapters running over ``slot`` (holds ``_cond``)."""
        return [s for s in self._slots.values() if s.base == slot.name and s.state == "loaded"]

    def _busy(self, slot: _Slot) -> bool:
        """Leased, or a base one of whose adapters is leased (holds ``_cond``)."""
        return slot.users > 0 or any(a.users for a in self._adapters_of(slot))

    def resolve(self, asked: Any, *, strict: bool = True) -> str:
        """The served name of the model a request's ``model`` names: a store
        ID or a name that slugs to one (``Qwen3-0.6B``, Ollama's
        ``qwen3:0.6b`` and ``tiny:latest``); none named: the default (the
        preloaded model, else the one used last). ``model_not_found`` for
        anything else, with the pull command for a catalog name not pulled
        yet: a request never downloads (``ModelRoster.resolve``). ``strict``
        is the protocol's (``SingleModel`` reads it): a pool's names are always strict."""
        string(asked, "model", nullable=True)
        return self.roster.resolve(asked) if asked else self._default()

    def _default(self) -> str:
        if self.default_name is not None:
            return self.default_name
        with self._cond:
            used = sorted((s for s in self._slots.values() if s.state == "loaded"), key=lambda s: s.last_used)
        if used:
            return used[-1].name
        last = self.store.last_loaded()
        if last is not None:
            return last
        raise invalid("model", "is required: name one of the models GET /v1/models lists")

    # ---------------------------------------------------------------- leases
    def try_acquire(self, name: str) -> Lease | None:
        """A lease on ``name`` if it is loaded (never blocks), else None."""
        with self._cond:
            slot = self._slots.get(name)
            if slot is None or slot.state != "loaded" or slot.engine is None or not slot.engine.loaded:
                return None
            return self._lease(slot)

    def _lease(self, slot: _Slot) -> Lease:
        slot.users += 1
        slot.last_used = time.monotonic()
        slot.unload_pending = False
        assert slot.engine is not None
        return Lease(self, slot, slot.engine)

    def acquire(self, name: str, timeout: float = ACQUIRE_TIMEOUT_S) -> Lease:
        """A lease on ``name``, loading it first if need be (blocks: call it
        off the IOLoop). ``busy`` when no room could be made within
        ``timeout`` seconds (every loaded model is leased)."""
        lease = self.try_acquire(name)
        if lease is not None:
            return lease
        slot = self._slot_for(name)
        if slot.base is not None:
            return self._acquire_adapter(slot, timeout)
        return self._load_with_room(slot, time.monotonic() + timeout, timeout)

    def _acquire_adapter(self, slot: _Slot, timeout: float) -> Lease:
        """A lease on an adapter: its base leased (loaded first if need be)
        while the adapter is made over it, then the adapter's own lease."""
        assert slot.base is not None
        deadline = time.monotonic() + timeout
        base = self.acquire(slot.base, timeout)
        try:
            return self._load_with_room(slot, deadline, timeout, base.engine)
        finally:
            base.release()

    def _load_with_room(self, slot: _Slot, deadline: float, timeout: float,
                        base_engine: Engine | None = None) -> Lease:
        """Under the load lock: ``slot`` leased if a load beat us to it, else room made and ``slot`` loaded."""
        self.roster.size(slot.name)  # read now, not while _cond is held (the IOLoop's try_acquire takes it)
        if not self._load_lock.acquire(timeout=max(0.0, deadline - time.monotonic())):
            raise MnnEngineError("busy", f"waited {timeout:g} s for another model's load")
        try:
            if self._closed:
                raise MnnEngineError("server_stopping", "the server is stopping")
            with self._cond:
                if slot.state == "loaded" and slot.engine is not None and slot.engine.loaded:
                    return self._lease(slot)
                victims = self._make_room(slot, deadline)
            for victim in victims:
                self._unload_slot(victim, "evicted")
            return self._load(slot, base_engine=base_engine)
        finally:
            self._load_lock.release()

    def _make_room(self, slot: _Slot, deadline: float) -> list[_Slot]:
        """The idle models to unload (least recently used first; a base's
        adapters before it) so that ``slot`` fits; waits while the room is
        leased. Holds ``_cond``."""
        while True:
            loaded = [s for s in self._slots.values() if s.state == "loaded" and s is not slot]
            idle = sorted((s for s in loaded if not self._busy(s) and s.name != slot.base), key=lambda s: s.last_used)
            size = self.roster.size(slot.name)
            victims: list[_Slot] = []
            kept = list(loaded)
            while self._over(kept, size, slot) and idle:
                victim = idle.pop(0)
                for gone in [*(a for a in self._adapters_of(victim) if a in kept), victim]:
                    victims.append(gone)
                    kept.remove(gone)
                    if gone in idle:
                        idle.remove(gone)
            if not self._over(kept, size, slot):
                for victim in victims:
                    victim.state = "unloading"
                return victims
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                busy = ", ".join(s.name for s in kept if s.users)
                raise MnnEngineError("busy", f"no room to load {slot.name}: {busy} in use "
                                     f"(at most {self.max_loaded} loaded; serve --max-loaded)")
            self._cond.wait(remaining)

    def _over(self, kept: list[_Slot], size: int, slot: _Slot) -> bool:
        """Whether ``slot`` (``size`` bytes) beside ``kept`` is one model too
        many or too big for the budget (alone, a model always loads; an
        adapter is no model more: it adds no weights)."""
        too_many = sum(1 for s in kept if s.base is None) + (slot.base is None) > self.max_loaded
        too_big = bool(self.memory_budget) and bool(kept) and \
            sum(self.roster.size(s.name) for s in kept) + size > self.memory_budget
        return too_many or too_big

    def _load(self, slot: _Slot, overrides: Mapping[str, Any] | None = None,
              base_engine: Engine | None = None) -> Lease:
        """Load ``slot`` (holding ``_load_lock``; an adapter over ``base_engine``'s model) and lease it."""
        self.roster.size(slot.name)
        model_id, target = self.roster.target(slot.name)
        options = model_options(self.store, model_id, defaults=self.defaults, overrides=overrides) \
            if base_engine is None else None
        engine = self._engine_factory(ModelStore(self.store.root), self.events)
        with self._cond:
            slot.state = "loading"
            self._loading = {"model": slot.name, "started": time.time(), "progress": None}
        started = time.monotonic()
        try:
            if base_engine is not None:
                pair = self.roster.adapter_of(slot.name)
                if pair is None:
                    raise MnnEngineError("model_not_found", f"the adapter {slot.name!r} is no longer in the store",
                                         param="model")
                engine.load_adapter(base_engine, pair[1])
            else:
                engine.load(target, options)
        except BaseException as exc:
            engine.close()
            with self._cond:
                slot.state, self._loading = "unloaded", None
                if isinstance(exc, MnnEngineError):
                    self._last_error = {"code": exc.code, "message": exc.message, "time": time.time(),
                                        "model": slot.name}
                self._cond.notify_all()
            raise
        log.info("loaded %s in %.2f s (%d of at most %d loaded)", slot.name, time.monotonic() - started,
                 self.loaded_count() + 1, self.max_loaded)
        if base_engine is not None:  # an adapter counts at what it cost (its file's size until measured)
            self.roster.measured(slot.name, engine.llm.adapter_bytes)
        with self._cond:
            slot.engine, slot.state, self._loading = engine, "loaded", None
            self._cond.notify_all()
            return self._lease(slot)

    def _release(self, slot: _Slot, keep_alive: Any) -> None:
        with self._cond:
            slot.users = max(0, slot.users - 1)
            slot.last_used = time.monotonic()
            if keep_alive is ... and slot.unload_pending:
                keep_alive = 0.0  # an explicit unload wins over a default release
            elif keep_alive is ...:
                keep_alive = None if slot.keep_forever else self.keep_alive
            else:
                slot.keep_forever = False  # a request said how long: the preloaded model follows it too
            slot.expires = NEVER if keep_alive is None else slot.last_used + keep_alive
            base = self._slots.get(slot.base) if slot.base is not None else None
            if base is not None and base.state == "loaded":  # the base lives at least as long as its adapter,
                base.last_used = slot.last_used  # unless its own unload was asked: then it goes once free
                base.expires = min(base.expires, slot.last_used) if base.unload_pending else \
                    max(base.expires, slot.expires)
            self._cond.notify_all()

    def preload(self, model: str, overrides: Mapping[str, Any] | None = None) -> str:
        """Load ``model`` (a store ID or a model directory) now, as the default
        for requests that name none, kept loaded (``serve MODEL``). Returns
        its served name. ``overrides``: load options for it alone (``serve``'s
        flags, which are also the defaults for the rest)."""
        name = self.roster.add(model)
        slot = self._slot_for(name)
        with self._cond:
            slot.keep_forever = True
        with self._load_lock:
            lease = self._load(slot, {**self.defaults, **(overrides or {})})
        lease.release()
        self.default_name = name
        return name

    # ---------------------------------------------------------------- unloading
    def unload(self, name: str) -> None:
        """Unload ``name`` now (Ollama's ``keep_alive: 0`` with nothing to
        generate); a leased model unloads when its lease ends. Blocks."""
        with self._load_lock:
            with self._cond:
                slot = self._slots.get(name)
                if slot is None or slot.state != "loaded":
                    return
                slot.keep_forever, slot.expires = False, time.monotonic()
                if self._busy(slot):
                    slot.unload_pending = True
                    self._cond.notify_all()
                    return
                adapters = self._adapters_of(slot)
                for gone in [*adapters, slot]:
                    gone.state = "unloading"
            for gone in [*adapters, slot]:
                self._unload_slot(gone, "keep_alive")

    def _unload_slot(self, slot: _Slot, reason: str) -> None:
        """Unload a slot marked ``unloading`` (holding ``_load_lock``)."""
        engine = slot.engine
        try:
            if engine is not None:
                engine.unload(reason)
                engine.close()
        finally:
            with self._cond:
                slot.engine, slot.state, slot.expires = None, "unloaded", NEVER
                slot.keep_forever = False  # loaded again on demand, it follows the keep-alive
                self._cond.notify_all()
            give_back_memory()
        log.info("unloaded %s (%s)", slot.name, reason)

    def _reap(self) -> None:
        """Unload models whose keep-alive ran out (the reaper thread)."""
        while True:
            with self._cond:
                if self._closed:
                    return
                idle = [s for s in self._slots.values() if s.state == "loaded" and not self._busy(s)]
                due = min((s.expires for s in idle), default=NEVER)
                wait = due - time.monotonic()
                if wait > 0:
                    self._cond.wait(None if due == NEVER else wait)
                    continue
            with self._load_lock:
                with self._cond:
                    now = time.monotonic()
                    expired = [s for s in self._slots.values()
                               if s.state == "loaded" and not self._busy(s) and s.expires <= now]
                    for base in [s for s in expired if s.base is None]:  # its adapters go first
                        expired += [a for a in self._adapters_of(base) if a not in expired]
                    expired.sort(key=lambda s: s.base is None)
                    for slot in expired:
                        slot.state = "unloading"
                for slot in expired:
                    try:
                        self._unload_slot(slot, "expired")
                    except Exception:  # the next request's load reports what is wrong
                        log.exception("unloading %s failed", slot.name)

    def close(self) -> None:
        """Stop its background server if one runs, then unload every model
        (waiting for a load in progress); the pool serves no more."""
        if self._server_state != "stopped":
            with contextlib.suppress(MnnEngineError):  # serve_forever's server: stopped by its signal already
                self.stop_server()
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        with self._load_lock:
            with self._cond:
                loaded = sorted((s for s in self._slots.values() if s.state == "loaded"),
                                key=lambda s: s.base is None)  # adapters before the bases they run over
                for slot in loaded:
                    slot.state = "unloading"
            for slot in loaded:
                self._unload_slot(slot, "closed")

    # ---------------------------------------------------------------- what the server shows
    def loaded_count(self) -> int:
        with self._cond:
            return sum(1 for s in self._slots.values() if s.state == "loaded")

    def loaded_engines(self) -> list[tuple[str, Engine]]:
        with self._cond:
            return [(s.name, s.engine) for s in self._slots.values() if s.state == "loaded" and s.engine is not None]

    @property
    def generating(self) -> bool:
        """Whether any model is generating (the server runs one generation at a time)."""
        return any(engine.generating for _, engine in self.loaded_engines())

    @property
    def generation_cancelled(self) -> bool:
        return any(engine.generation_cancelled for _, engine in self.loaded_engines())

    def facts(self, name: str) -> ModelFacts:
        """What a model is, from its files (``ModelRoster.facts``: read once; off the IOLoop)."""
        with self._cond:
            known = name in self._slots
        return self.roster.facts(name if known else self.resolve(name))

    def models(self) -> list[dict[str, Any]]:
        """Every model this pool serves (the store's, and a preloaded
        directory), with its state (reads the store: off the IOLoop)."""
        out = []
        for name in self.roster.names():
            try:
                facts = self.roster.facts(name)
            except MnnEngineError:
                continue  # deleted meanwhile, or broken: not served
            out.append(self._entry(facts))
        return out

    def model(self, name: str) -> dict[str, Any]:
        """One served model's entry (as ``models`` lists it); reads its files: off the IOLoop."""
        return self._entry(self.facts(name))

    def _entry(self, facts: ModelFacts) -> dict[str, Any]:
        with self._cond:
            slot = self._slots.get(facts.name) or _Slot(facts.name)  # never leased yet: unloaded
            engine = slot.engine if slot.state == "loaded" else None
            users, state, expires = slot.users, slot.state, slot.expires
        return model_entry(facts, engine=engine, state=state, users=users, expires=expires,
                           default=facts.name == self.default_name, store=self.store, defaults=self.defaults)

    def snapshot(self) -> dict[str, Any]:
        """The engine-style picture of the pool (/health): the model in
        front (the default when loaded, else the one used last), the loaded
        ones, a load in progress, the generation, the last error."""
        with self._cond:
            loaded = [s for s in self._slots.values() if s.state == "loaded" and s.engine is not None]
            loading, last_error = self._loading, self._last_error
            server = {"state": self._server_state, "address": self._server_address}
        front = next((s for s in loaded if s.name == self.default_name), None) or \
            max(loaded, key=lambda s: s.last_used, default=None)
        snaps = {s.name: s.engine.snapshot() for s in loaded if s.engine is not None}
        busy = [snap for snap in snaps.values() if snap["generation"]["state"] != "idle"]
        if front is not None and front.name in snaps:
            model = snaps[front.name]["model"]
        else:
            model = {"state": "loading" if loading else "unloaded", "id": None, "path": None, "options": None}
        errors = [e for e in [last_error, *(s["last_error"] for s in snaps.values())] if e]
        return {
            "engine": "generating" if busy else ("loading" if loading else ("ready" if loaded else "idle")),
            "model": model,
            "loaded": [{"name": name, "id": snap["model"]["id"], "kind": snap["model"].get("kind"),
                        "context_length": snap["model"].get("context_length")} for name, snap in snaps.items()],
            "loading": loading,
            "server": server,
            "generation": busy[0]["generation"] if busy else {"state": "idle", "started": None},
            "last_error": max(errors, key=lambda e: e.get("time", 0), default=None),
        }

    # ---------------------------------------------------------------- the server's lifecycle
    def start_server(self, **options: Any) -> str:
        """Serve these models over HTTP on a background thread (as
        ``Engine.start_server``; ``options``: the server's settings); returns its URL."""
        return server_launcher()[0](self, **options)

    def stop_server(self) -> None:
        server_launcher()[1](self)

    def require_ready_for_server(self) -> None:
        if self._server_state != "stopped":
            raise MnnEngineError("server_running", f"the server is already {self._server_state}")

    def set_server_state(self, state: str, address: str | None = None) -> None:
        with self._cond:
            self._server_state, self._server_address = state, address
        self.events.emit("server", state, address=address)

    def pull(self, spec: str, **options: Any) -> ModelInfo:
        """``store.pull`` with the pool's events (``Engine.pull``'s)."""
        return pull_with_events(self.store, self.events, spec, **options)


def check_keep_alive(seconds: Any) -> float | None:
    """A keep-alive in seconds (None: forever), or ``invalid_argument``."""
    if seconds is None:
        return None
    if not is_number(seconds) or math.isnan(seconds):  # infinite is taken: forever
        raise invalid("keep_alive", f"must be a number of seconds (got {seconds!r})")
    return None if seconds < 0 or seconds == float("inf") else float(seconds)
