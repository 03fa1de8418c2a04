"""The engine: one active model, one generation at a time, the runtime rules.

Rules (each violation is an ``MnnEngineError`` with the code shown):

- one active model; loading another replaces it (``server_running`` while the
  server runs);
- one generation at a time (``busy``: the model's claim, ``Llm.claim``);
- the server needs a loaded model (``model_not_loaded``);
- the server must be stopped before the active model is unloaded, deleted or
  replaced (``server_running``);
- a generation failure unloads the model and clears the active model (recover:
  stop the server, load, start the server); finishing, hitting the length limit
  and cancelling keep it loaded;
- shutdown: stop the server, then unload.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from ..errors import MnnEngineError
from ..runtime.build import backend_capabilities, require_backend
from ..runtime.embedding import EmbeddingResult, embedding_inputs
from ..runtime.generation import GenerationResult, ScoreResult
from ..runtime.llm import Llm
from ..runtime.prompt import Prompt, chat_messages
from ..runtime.streaming import astream_pieces, stream_pieces
from ..store.adapters import adapter_id
from ..store.layout import ModelInfo, ModelLock, model_id_from_name, served_name
from ..store.models import ModelStore
from .events import EventStream, LogBuffer
from .protocol import ServerLauncher
from .settings import LoadOptions

log = logging.getLogger("mnn_engine.engine")

#: how long a submit waits for a cancelled generation to stop (one token; a
#: slow prefill chunk at most) before it is ``busy``
CANCELLED_WAIT_S = 30.0


def _options_from(options: LoadOptions | None, overrides: Mapping[str, Any]) -> LoadOptions:
    return (options or LoadOptions()).updated(overrides)


def model_options(store: ModelStore, model_id: str | None, *, defaults: Mapping[str, Any] | None = None,
                  overrides: Mapping[str, Any] | None = None, checked: bool = False) -> LoadOptions:
    """How ``model_id`` loads, in layers, each over the one before: the
    defaults of ``LoadOptions``, ``defaults`` (``serve``'s flags, for the
    models it loads on demand), the model's tuned preset (``bench --tune``),
    its own options (``models config``), then ``overrides`` (what the caller
    asked for this load). A stored layer that is no longer usable (a backend
    this build lacks, a value out of range) is skipped with a warning.
    ``checked``: the caller checked ``overrides`` already (each field is
    checked alone, so what passed over the defaults passes over any layer)."""
    options = _options_from(None, dict(defaults or {}))
    if model_id is not None:
        for name, layer in (("preset", store.preset(model_id)), ("options", store.model_options(model_id))):
            if not layer:
                continue
            try:
                options = _options_from(options, dict(layer))
            except MnnEngineError as exc:
                log.warning("ignoring the unusable %s of %s: %s", name, model_id, exc.message)
    return replace(options, **dict(overrides or {})) if checked else _options_from(options, dict(overrides or {}))


def pull_with_events(store: ModelStore, events: EventStream, spec: str, *,
                     progress: Callable[[int, int, str], None] | None = None, **options: Any) -> ModelInfo:
    """``store.pull`` (see ``ModelStore.pull``) with events: ``pull``
    ``running``, ``progress`` (at most twice a second, with ``done`` and
    ``total`` bytes), then ``done`` or ``failed`` (with the error code)."""
    last = [0.0]

    def report(done: int, total: int, name: str) -> None:
        now = time.monotonic()
        if done >= total or now - last[0] >= 0.5:
            last[0] = now
            events.emit("pull", "progress", spec=spec, done=done, total=total)
        if progress is not None:
            progress(done, total, name)

    events.emit("pull", "running", spec=spec)
    try:
        info = store.pull(spec, progress=report, **options)
    except MnnEngineError as exc:
        events.emit("pull", "failed", spec=spec, error=exc.code)
        raise
    events.emit("pull", "done", spec=spec, model_id=info.id)
    return info


class Engine:
    """Owns the active model, its generations and (later) the HTTP server.

    Safe to drive from several threads. State is observable three ways:
    ``snapshot()``, ``events`` (subscribe or ``async for``) and ``logs``.
    """

    def __init__(self, store: ModelStore | None = None, *, log_capacity: int = 1000,
                 events: EventStream | None = None) -> None:
        self.store = store if store is not None else ModelStore()
        self.store.in_use = self._is_active
        #: shared with other engines when a ``ModelPool`` owns this one (its events name their model)
        self.events = events if events is not None else EventStream()
        self.logs = LogBuffer(log_capacity)
        # _lock orders lifecycle operations (load, unload, server) and may be
        # held while a generation winds down; _state_lock guards the fields and
        # is only ever held briefly, so snapshots and callbacks never wait.
        self._lock = threading.RLock()
        self._state_lock = threading.Lock()
        self._generation_ended = threading.Condition(self._state_lock)
        self._llm: Llm | None = None
        self._model_id: str | None = None
        self._model_path: Path | None = None
        self._options: LoadOptions | None = None
        self._model_lock: ModelLock | None = None  # held while a store model is loaded
        # a LoRA adapter served over a base: the base's Llm when this engine loaded it (closed after the
        # adapter; None when another engine's base is shared), the base's ID, the stored adapter's lock
        self._base_llm: Llm | None = None
        self._base_id: str | None = None
        self._adapter_lock: ModelLock | None = None
        self._model_state = "unloaded"
        self._generation_state = "idle"  # or "running", or "cancelling" (cancelled, ends before its next token)
        self._generation_started: float | None = None
        self._generation_ticket: object | None = None  # which generation the state is about
        self._server_state = "stopped"
        self._server_address: str | None = None
        self._last_error: dict[str, Any] | None = None
        self._last_result: GenerationResult | None = None
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="mnn-engine-generation")

    # ---------------------------------------------------------------- state
    def _is_active(self, model_id: str) -> bool:
        return self._llm is not None and model_id in (self._model_id, self._base_id if self._base_llm else None)

    @property
    def loaded(self) -> bool:
        """Whether a model is loaded."""
        return self._llm is not None

    @property
    def llm(self) -> Llm:
        """The loaded model (``model_not_loaded`` if none)."""
        llm = self._llm
        if llm is None:
            raise MnnEngineError("model_not_loaded", "no model is loaded")
        return llm

    @property
    def loaded_model(self) -> Llm:
        """The loaded model as the server sees it (``protocol.ServedModel``: ``llm``, typed narrower)."""
        return self.llm

    @property
    def generating(self) -> bool:
        """Whether a generation is running (or starting)."""
        with self._state_lock:
            return self._generation_state != "idle"

    @property
    def generation_cancelled(self) -> bool:
        """Whether the running generation was cancelled (it ends before its next token)."""
        with self._state_lock:
            return self._generation_state == "cancelling"

    @property
    def active_model_id(self) -> str | None:
        return self._model_id if self._llm is not None else None

    def snapshot(self) -> dict[str, Any]:
        """A consistent picture of the engine's state."""
        with self._state_lock:
            model: dict[str, Any] = {"state": self._model_state, "id": None, "path": None, "options": None}
            if self._model_path is not None:
                model.update(id=self._model_id, path=str(self._model_path),
                             options=asdict(self._options) if self._options else None)
            if self._llm is not None:
                model["context_length"] = self._llm.context_length
                model["prompt_cache_tokens"] = self._llm.held_tokens
                model["kind"] = self._llm.kind
                model["speculative"] = self._llm.speculative_default
                if self._llm.adapter is not None:
                    model["base"], model["adapter"] = self._base_id, self._llm.adapter.name
            busy = self._generation_state != "idle"
            return {
                "engine": "generating" if busy else ("ready" if self._llm is not None else "idle"),
                "model": model,
                "server": {"state": self._server_state, "address": self._server_address},
                "generation": {"state": self._generation_state, "started": self._generation_started},
                "last_error": self._last_error,
            }

    def _update(self, **fields: Any) -> None:
        with self._state_lock:
            for name, value in fields.items():
                setattr(self, f"_{name}", value)

    def _set_model_state(self, state: str, **data: Any) -> None:
        self._update(model_state=state)
        self.events.emit("model", state, model_id=self._model_id, **data)

    def _record_error(self, error: MnnEngineError) -> None:
        self._update(last_error={"code": error.code, "message": error.message, "time": time.time()})

    def backend_capabilities(self) -> dict[str, dict[str, bool]]:
        return backend_capabilities()

    # ---------------------------------------------------------------- lifecycle
    def load(self, model: str | os.PathLike[str], options: LoadOptions | None = None, *,
             adapter: str | os.PathLike[str] | None = None, **option_kwargs: Any) -> dict[str, Any]:
        """Load a model (a store ID or a model directory) as the active model,
        replacing the current one. ``options`` are used as given; otherwise a
        store model's tuned preset (``bench --tune``) is the base, with any
        keyword options (``threads=2``...) applied on top. ``adapter``: a LoRA
        adapter to serve over it (a name the store holds over this model, or an
        adapter's directory; ``Llm.with_adapter``), the model loaded beneath it.
        Returns the model part of the snapshot."""
        # bad options fail before anything else; each is checked once (model_options takes them as checked)
        given = _options_from(options, option_kwargs)
        model_id, path = self.store.resolve(model)
        opts = given if options is not None else \
            model_options(self.store, model_id, overrides=option_kwargs, checked=True)
        require_backend(opts.backend)
        with self._lock:
            if self._server_state != "stopped" and self._llm is not None:
                raise MnnEngineError("server_running", "stop the server before replacing the active model")
            if self._llm is not None:
                self._unload_locked("replaced")
            lock = self.store.hold(model_id) if model_id is not None else None
            self._update(model_id=model_id, model_path=path, options=opts)
            self._set_model_state("loading")
            llm: Llm | None = None
            base_llm: Llm | None = None
            try:
                files = self.store.model_dir(path)
                cache_dir = self.store.prepared_cache(model_id, files)
                llm = Llm(files, **opts.llm_arguments(cache_dir))
                llm.load()  # includes the warm-up forward
                if adapter is not None:
                    base_llm, llm = llm, None
                    llm = self._adapter_over(base_llm, model_id, served_name(model_id, str(path)) or "model", adapter)
            except BaseException as exc:  # an OSError or Ctrl-C too: the lock goes back, the engine is unloaded
                for opened in (llm, base_llm):
                    if opened is not None:
                        opened.close()
                if lock is not None:
                    lock.release()
                if self._adapter_lock is not None:
                    self._adapter_lock.release()
                    self._update(adapter_lock=None)
                error = exc if isinstance(exc, MnnEngineError) else MnnEngineError(
                    "internal_error", f"loading {model_id or path} failed: {exc!r}")
                self._record_error(error)
                self._update(model_id=None, model_path=None, options=None, base_id=None)
                self._set_model_state("unloaded", error=error.code)
                raise
            self._update(llm=llm, model_lock=lock, base_llm=base_llm)
            self._set_model_state("loaded")
            if model_id is not None:
                self.store.touch(model_id)
            log.info("model %s loaded (%s, %d threads)", model_id or path, opts.backend, opts.threads)
            return self.snapshot()["model"]

    def pull(self, spec: str, *, progress: Callable[[int, int, str], None] | None = None,
             **options: Any) -> ModelInfo:
        """``store.pull`` with engine events (see ``pull_with_events``)."""
        try:
            return pull_with_events(self.store, self.events, spec, progress=progress, **options)
        except MnnEngineError as exc:
            self._record_error(exc)
            raise

    def unload(self, reason: str = "unloaded") -> None:
        """Unload the active model (``server_running`` while the server runs);
        ``reason`` goes into the ``model`` events (a pool says ``expired``, ``evicted``...)."""
        with self._lock:
            if self._server_state != "stopped":
                raise MnnEngineError("server_running", "stop the server before unloading the model")
            if self._llm is None:
                return
            self._unload_locked(reason)

    def _adapter_over(self, base: Llm, base_id: str | None, base_name: str, adapter: str | os.PathLike[str]) -> Llm:
        """``adapter`` (a stored adapter of ``base_id``, or a directory) over the loaded ``base``; the
        engine's model ID becomes the adapter's served name (``BASE_NAME``), its lock held while loaded."""
        stored = base_id is not None and isinstance(adapter, str) and "/" not in adapter and \
            not Path(adapter).exists()
        if stored:
            assert base_id is not None and isinstance(adapter, str)
            name = model_id_from_name(adapter)
            self.store.get_adapter(base_id, name)
            self._update(adapter_lock=self.store.hold_adapter(base_id, name))
            where: str | os.PathLike[str] = self.store.adapter_path(base_id, name)
        else:
            where = adapter
            name = model_id_from_name(Path(adapter).resolve().name)
        served = base.with_adapter(where)
        self._update(model_id=adapter_id(base_id or base_name, name), model_path=served.adapter.path
                     if served.adapter else Path(where), base_id=base_id or base_name)
        return served

    def load_adapter(self, base: Engine, adapter: str) -> dict[str, Any]:
        """Serve the stored ``adapter`` over the model ``base`` has loaded
        (a pool's adapter: the base's weights are shared, and the base stays
        ``base``'s to unload, after this). Returns the model part of the snapshot."""
        base_llm, base_id = base.llm, base.active_model_id
        with self._lock:
            if self._llm is not None:
                self._unload_locked("replaced")
            self._update(options=base._options)
            self._set_model_state("loading")
            try:
                llm = self._adapter_over(base_llm, base_id, base_id or "model", adapter)
            except BaseException as exc:
                if self._adapter_lock is not None:
                    self._adapter_lock.release()
                error = exc if isinstance(exc, MnnEngineError) else MnnEngineError(
                    "internal_error", f"creating adapter {adapter} failed: {exc!r}")
                self._record_error(error)
                self._update(model_id=None, model_path=None, options=None, base_id=None, adapter_lock=None)
                self._set_model_state("unloaded", error=error.code)
                raise
            self._update(llm=llm)
            self._set_model_state("loaded")
            return self.snapshot()["model"]

    def _unload_locked(self, reason: str, **data: Any) -> None:
        llm, base_llm = self._llm, self._base_llm
        self._update(llm=None, base_llm=None)  # no new generation can start from here on
        self._set_model_state("unloading", reason=reason)
        if llm is not None:
            llm.close()  # cancels a running generation and waits for it
        if base_llm is not None:  # the base this engine loaded beneath its adapter: after it
            base_llm.close()
        self._set_model_state("unloaded", reason=reason, **data)
        for held in (self._model_lock, self._adapter_lock):
            if held is not None:
                held.release()
        self._update(model_id=None, model_path=None, options=None, model_lock=None, adapter_lock=None, base_id=None)

    def close(self) -> None:
        """Shut down in order: stop the server, then unload."""
        if self._server_state != "stopped":
            self.stop_server()
        with self._lock:
            if self._llm is not None:
                self._unload_locked("closed")
        self._executor.shutdown(wait=True)
        self.logs.close()

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---------------------------------------------------------------- generation
    def _active_llm(self) -> Llm:
        with self._state_lock:
            llm = self._llm
        if llm is None:
            raise MnnEngineError("model_not_loaded", "no model is loaded")
        return llm

    def _after_cancelled(self) -> None:
        """Wait for a cancelled generation to end (it stops before its next
        token), so "Stop, then send" is not ``busy``. A running generation
        that was not cancelled is not waited for: that is ``busy``. The
        server never waits here: its queue submits only when idle."""
        with self._state_lock:
            self._generation_ended.wait_for(lambda: self._generation_state != "cancelling", CANCELLED_WAIT_S)

    def _begin_generation(self) -> object:
        """Record that a generation holding the model's claim started; returns its ticket."""
        ticket = object()
        with self._state_lock:
            self._generation_state = "running"
            self._generation_started = time.time()
            self._generation_ticket = ticket
            model_id = self._model_id
        self.events.emit("generation", "running", model_id=model_id)
        return ticket

    def _end_generation(self, ticket: object, llm: Llm, result: GenerationResult | None,
                        error: BaseException | None, read: tuple[str, int] | None = None) -> None:
        """``read``: work that generated nothing (an embedding, a score) ended as (state, tokens read)."""
        with self._state_lock:
            if self._generation_ticket is ticket:  # a later generation may have claimed the model already
                self._generation_state = "idle"
                self._generation_started = None
                self._generation_ticket = None
                self._generation_ended.notify_all()
            if result is not None:
                self._last_result = result
            model_id = self._model_id
        failed = result is not None and result.finish_reason == "error"
        state = "failed" if failed else (result.finish_reason if result is not None else "aborted")
        data: dict[str, Any] = {"model_id": model_id}
        if read is not None:
            state, tokens = read
            data["usage"] = {"prompt_tokens": tokens, "total_tokens": tokens}
        if result is not None:
            data["usage"] = result.usage
            data["time_to_first_token_ms"] = result.time_to_first_token_ms
            data["decode_tokens_per_second"] = result.decode_tokens_per_second
        if error is not None and not isinstance(error, MnnEngineError):
            data["error"] = type(error).__name__
        self.events.emit("generation", state, **data)
        if failed:
            with self._lock:
                if self._llm is llm:
                    exc = MnnEngineError("generation_failed", f"generation failed: {result.error}; model unloaded")
                    self._record_error(exc)
                    log.error("generation failed (%s); unloading %s", result.error, model_id)
                    self._unload_locked("generation_failed")

    @staticmethod
    def _checked(result: GenerationResult) -> GenerationResult:
        if result.finish_reason == "error":
            raise MnnEngineError("generation_failed",
                                 f"generation failed: {result.error}; the model was unloaded (load it again)")
        return result

    def submit(self, prompt: Prompt, callback: Callable[[str], Any] | None = None, *,
               on_prompt: Callable[[str | None, int], Any] | None = None,
               **sampling: Any) -> Future[GenerationResult]:
        """Start a generation on the engine's generation thread.

        What can be refused without tokenizing is checked here, in the
        caller's thread (``model_not_loaded``, ``busy``, bad arguments, text
        too long for the context), so a server can answer at once. The chat
        template and the tokenizer run on the generation thread; their errors
        (``context_length_exceeded``, ``empty_prompt``) come through the
        returned future, like the result and the callback's or the engine's
        exceptions. ``callback`` runs on the generation thread, and so does
        ``on_prompt``, which gets the rendered prompt text (and the number of
        messages dropped to fit the context) first.
        """
        self._after_cancelled()
        llm = self._active_llm()
        prepared = llm.prepare(prompt, **sampling)  # busy and bad arguments are raised here
        ticket = self._begin_generation()

        def work() -> GenerationResult:
            result: GenerationResult | None = None
            error: BaseException | None = None
            try:
                result = prepared.run(callback, on_prompt)
            except BaseException as exc:
                error = exc
                raise
            finally:
                self._end_generation(ticket, llm, result, error)
            return self._checked(result)

        return self._on_generation_thread(work, ticket, llm, prepared.abandon)

    def generate(self, prompt: Prompt, callback: Callable[[str], Any] | None = None,
                 **sampling: Any) -> GenerationResult:
        """One generation on the active model (see ``Llm.generate``); Ctrl-C
        while waiting cancels it."""
        future = self.submit(prompt, callback, **sampling)
        try:
            return future.result()
        except KeyboardInterrupt:
            self.cancel_generation()
            with contextlib.suppress(BaseException):
                future.result()
            raise

    def chat(self, messages: Sequence[Mapping[str, Any]], **sampling: Any) -> GenerationResult:
        """Answer chat messages; returns the whole result."""
        return self.generate(chat_messages(messages), **sampling)

    def stream_chat(self, messages: Sequence[Mapping[str, Any]], **sampling: Any) -> Iterator[str]:
        """Answer chat messages piece by piece. Closing the iterator, or Ctrl-C
        while it waits, cancels the generation (the model stays loaded)."""
        yield from stream_pieces(lambda put: self.submit(chat_messages(messages), put, **sampling),
                                 self.cancel_generation)

    async def astream_chat(self, messages: Sequence[Mapping[str, Any]], **sampling: Any) -> AsyncIterator[str]:
        """``stream_chat`` for asyncio: never blocks the event loop."""
        async for piece in astream_pieces(lambda put: self.submit(chat_messages(messages), put, **sampling),
                                          self.cancel_generation):
            yield piece

    def submit_embed(self, inputs: Any, *, normalize: bool = True, truncate: bool = False) -> Future[EmbeddingResult]:
        """Embed texts or token ids on the generation thread (see
        ``Llm.embed``); it counts as the one running generation. Refusals
        that need no tokenizing (``model_not_loaded``, ``busy``,
        ``wrong_model_kind``, malformed inputs) are raised here."""
        llm = self._active_llm()
        llm.require_kind("embedding")
        items = embedding_inputs(inputs)

        def run(claim: Any) -> EmbeddingResult:
            return llm.embed(items, normalize=normalize, truncate=truncate, claim=claim)

        return self._submit_claimed(llm, run, lambda result: ("embedded", result.prompt_tokens))

    def submit_score(self, prompt: Prompt, continuation: Any, *, top_logprobs: int = 0) -> Future[ScoreResult]:
        """Score a continuation on the generation thread (see ``Llm.score``); it
        counts as the one running generation and ``cancel_generation`` stops it.
        ``model_not_loaded``, ``busy`` and ``wrong_model_kind`` are raised here."""
        llm = self._active_llm()
        llm.require_kind("chat")

        def run(claim: Any) -> ScoreResult:
            return llm.score(prompt, continuation, top_logprobs=top_logprobs, claim=claim)

        return self._submit_claimed(llm, run, lambda result: ("cancelled" if result.cancelled else "scored",
                                                             result.prompt_tokens + len(result.token_ids)))

    def _submit_claimed(self, llm: Llm, run: Callable[[Any], Any],
                        ended: Callable[[Any], tuple[str, int]]) -> Future[Any]:
        """``run(claim)`` on the generation thread with the model claimed, as the one running
        generation; its end is the event ``generation`` in the state ``ended(result)`` gives, with the
        tokens it read."""
        self._after_cancelled()
        claim = llm.claim()  # busy is raised here
        ticket = self._begin_generation()

        def work() -> Any:
            try:
                result = run(claim)
            except BaseException as exc:
                self._end_generation(ticket, llm, None, exc)
                raise
            self._end_generation(ticket, llm, None, None, read=ended(result))
            return result

        return self._on_generation_thread(work, ticket, llm, claim.release)

    def _on_generation_thread(self, work: Callable[[], Any], ticket: object, llm: Llm,
                              give_back: Callable[[], None]) -> Future[Any]:
        """Run ``work`` on the generation thread; if the engine is closed, give the claim back."""
        try:
            return self._executor.submit(work)
        except RuntimeError as exc:  # executor shut down by close()
            give_back()
            self._end_generation(ticket, llm, None, exc)
            raise MnnEngineError("model_not_loaded", "the engine is closed") from exc

    def embed(self, inputs: Any, *, normalize: bool = True, truncate: bool = False) -> EmbeddingResult:
        """Embed on the active model (an embedding model; see ``Llm.embed``)."""
        return self.submit_embed(inputs, normalize=normalize, truncate=truncate).result()

    def cancel_generation(self) -> None:
        """Stop the running generation before its next token (any thread)."""
        llm = self._llm
        if llm is not None:
            with self._state_lock:
                if self._generation_state == "running":
                    self._generation_state = "cancelling"
            llm.cancel()

    @property
    def last_result(self) -> GenerationResult | None:
        return self._last_result

    # ---------------------------------------------------------------- server state
    def set_server_state(self, state: str, address: str | None = None) -> None:
        """The HTTP server reports its state here (``starting``, ``running``,
        ``stopping``, ``stopped``): it shows in ``snapshot()`` and as an event."""
        self._update(server_state=state, server_address=address)
        self.events.emit("server", state, address=address)

    def start_server(self, **kwargs: Any) -> str:
        """Serve the active model over HTTP on a background thread; returns its URL."""
        return server_launcher()[0](self, **kwargs)

    def stop_server(self) -> None:
        """Stop the server (cancelling the active generation)."""
        server_launcher()[1](self)

    def require_model_for_server(self) -> None:
        with self._lock:
            if self._llm is None:
                raise MnnEngineError("model_not_loaded", "load a model before starting the server")
            if self._server_state != "stopped":
                raise MnnEngineError("server_running", f"the server is already {self._server_state}")


_launcher: ServerLauncher | None = None


def install_server_launcher(launcher: ServerLauncher) -> None:
    """The package installs the HTTP server's start and stop here
    (``mnn_engine/__init__.py``): the server sits above the engine, so the
    engine never imports it."""
    global _launcher
    _launcher = launcher


def server_launcher() -> ServerLauncher:
    if _launcher is None:
        raise MnnEngineError("server_not_running", "no HTTP server is installed (import mnn_engine)")
    return _launcher
