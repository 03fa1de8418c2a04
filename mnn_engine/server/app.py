"""The Tornado application: routes, authentication, errors, SSE streaming.

Everything here runs on one IOLoop. A request names its model
(``ServedModels.resolve``) and leases it for its turn, loaded on demand on the
load thread; generations run on that engine's generation thread and their
pieces come back through ``mnn_engine.runtime.streaming``
(``call_soon_threadsafe``), so the loop never waits on an engine and /health,
429 and 503 answer at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
import re
import secrets
import threading
import time
import urllib.parse
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

import tornado.web
from tornado.iostream import StreamClosedError
from tornado.log import access_log

from .. import __version__, jsonutil
from ..api.anthropic_messages import error_payload as anthropic_error
from ..api.anthropic_messages import model_info, model_list
from ..api.openai_chat import (
    ChatRequest,
    Completion,
    Delta,
    MediaPolicy,
    delta_dict,
    finish_reason,
    logprobs_object,
    message_from,
    parse_chat_request,
)
from ..api.response_store import ResponseStore
from ..checks import invalid
from ..errors import ERROR_CODES, MnnEngineError
from ..net import is_loopback_host
from ..runtime.embedding import EmbeddingResult
from ..runtime.generation import GenerationResult
from ..store.layout import served_name
from ..workers import DaemonPool
from .openapi import openapi_spec
from .session import GenerationSession
from .settings import DEFAULT_QUEUE_TIMEOUT, ServerSettings

T = TypeVar("T")

if TYPE_CHECKING:
    from ..engine.protocol import ModelLease, ServedEngine, ServedModels

log = logging.getLogger("mnn_engine.server")

#: what answers without the API key: the page and its files, the health check and the API description
PUBLIC_PATHS = frozenset({"/", "/health", "/openapi.json"})
PUBLIC_PREFIX = "/static/"
MAX_JSON_DEPTH = 64
#: a client's X-Request-Id that is echoed (anything else gets one of ours)
REQUEST_ID = re.compile(r"\A[\w.:-]{1,128}\Z")
#: what an HTML form posts: name=value pairs joined by & (a JSON body never starts so)
FORM_PAIRS = re.compile(r"\A[\w.%+~-]+=[^&]*(&[\w.%+~-]+=[^&]*)*\Z")
#: pulls that download at once (more wait their turn)
PULL_WORKERS = 2
#: threads for the tokenizer routes
TEXT_WORKERS = 2


@dataclass
class ServerContext:
    """What the handlers share."""

    #: the models served, by name (``engine.pool.ModelPool``)
    models: ServedModels
    settings: ServerSettings = field(default_factory=ServerSettings)
    stopping: bool = False
    fingerprint: str = field(default_factory=lambda: f"mnn-engine-{__version__}")
    started: float = field(default_factory=time.time)
    active: set[BodyHandler] = field(default_factory=set)
    #: /metrics (server.metrics.Metrics), set when the server starts
    metrics: Any = None
    #: the route patterns, for the metrics' route label (anything else counts as "other")
    routes: frozenset[str] = frozenset()
    #: the request queue (server.queue.GenerationQueue), set when the server starts
    queue: Any = None
    #: pulls run here (a few at once), never on the tokenizer routes' threads or the IOLoop
    pulls: DaemonPool = field(default_factory=lambda: DaemonPool("mnn-engine-pull", PULL_WORKERS))
    #: the stop events of the running pulls (set when the server stops)
    pull_stops: set[threading.Event] = field(default_factory=set)
    #: /events' fan-out (server.events.EventFanout), set when the server starts
    events: Any = None
    #: the tokenizer routes' work (tokenize, detokenize, templates), and reading models' files, off the IOLoop
    text_work: DaemonPool = field(default_factory=lambda: DaemonPool("mnn-engine-text", TEXT_WORKERS))
    #: the Responses API's stored responses (in memory, bounded, lost when the server stops)
    responses: ResponseStore = field(default_factory=ResponseStore)
    #: model loads (one at a time: ``ModelPool.acquire``), off the IOLoop
    loads: DaemonPool = field(default_factory=lambda: DaemonPool("mnn-engine-load", 1))
    #: new grammars' sandbox checks (one child, one at a time), outside the generation turn and off the
    #: text workers: a check may take up to a minute (``runtime.grammar_sandbox.CHECK_TIMEOUT_S``)
    grammar_checks: DaemonPool = field(default_factory=lambda: DaemonPool("mnn-engine-grammar", 1))


def error_body(code: str, message: str, param: str | None = None) -> dict[str, Any]:
    """OpenAI's error shape."""
    return {"error": {"message": message, "type": ERROR_CODES[code].openai_type, "param": param, "code": code}}


class JsonHandler(tornado.web.RequestHandler):
    """JSON errors for everything, authentication (a bearer token, or Anthropic's
    ``x-api-key``) for all but ``PUBLIC_PATHS``, and an ``X-Request-Id`` on every answer."""

    ctx: ServerContext
    #: the client's own X-Request-Id when it sent a well-formed one, else ours; on every answer
    #: (errors too: Tornado's clear() sets the default headers again) and in the access log line
    request_id = ""

    def initialize(self, ctx: ServerContext) -> None:
        self.ctx = ctx

    def set_default_headers(self) -> None:
        if not self.request_id:
            given = self.request.headers.get("X-Request-Id", "")
            self.request_id = given if REQUEST_ID.match(given) else "req_" + secrets.token_hex(12)
        self.set_header("X-Request-Id", self.request_id)

    def options(self, *_args: Any, **_kwargs: Any) -> None:
        # CORS preflight of an allowed origin (_check_host_and_origin); routes with named groups pass them by name
        self.set_status(204)
        self.finish()

    def _check_host_and_origin(self) -> None:
        """No access from other web pages unless allowed (CORS), and none
        through a foreign host name (DNS rebinding) when bound to loopback."""
        if self.ctx.settings.loopback_only and not is_loopback_host(self.request.host or ""):
            raise MnnEngineError("forbidden", f"Host {self.request.host!r} is not this server's loopback address")
        origin = self.request.headers.get("Origin")
        if origin is None or origin == f"{self.request.protocol}://{self.request.host}":
            return  # not a browser's cross-origin request
        allowed = self.ctx.settings.cors_origins
        if origin not in allowed and "*" not in allowed:
            raise MnnEngineError("forbidden", f"web pages from {origin} may not use this server "
                                              "(serve --cors-origin ORIGIN allows one)")
        self.set_header("Access-Control-Allow-Origin", "*" if "*" in allowed else origin)
        self.set_header("Vary", "Origin")
        if self.request.method == "OPTIONS":
            self.set_header("Access-Control-Allow-Headers",
                            "Authorization, Content-Type, X-Api-Key, Anthropic-Version, Anthropic-Beta")
            self.set_header("Access-Control-Allow-Methods", "GET, POST, OPTIONS")
            self.set_header("Access-Control-Max-Age", "600")

    def prepare(self) -> None:
        self._check_host_and_origin()
        key = self.ctx.settings.api_key
        public = self.request.path in PUBLIC_PATHS or self.request.path.startswith(PUBLIC_PREFIX)
        if not public and key and self.request.method != "OPTIONS":
            header = self.request.headers.get("Authorization", "")
            scheme, _, token = header.partition(" ")
            if scheme.lower() != "bearer":  # Anthropic's clients send the key as x-api-key
                token = self.request.headers.get("X-Api-Key", "")
            if not hmac.compare_digest(token.strip().encode(), key.encode()):
                raise MnnEngineError("unauthorized", "missing or wrong API key (Authorization: Bearer <key>, "
                                                     "or x-api-key: <key>)")

    def send_json(self, data: Any, status: int = 200) -> None:
        self.send_json_bytes(jsonutil.dumps(data), status)

    def send_json_bytes(self, body: bytes, status: int = 200) -> None:
        """An answer already serialised (off the IOLoop, for big ones)."""
        self.set_status(status)
        self.set_header("Content-Type", "application/json")
        self.finish(body)

    def on_finish(self) -> None:
        if self.ctx.metrics is not None:
            path = self.request.path
            self.ctx.metrics.request(path if path in self.ctx.routes else "other", self.get_status())

    def start_events(self) -> None:
        """Server-sent events from here on."""
        self.set_header("Content-Type", "text/event-stream; charset=utf-8")
        self.set_header("Cache-Control", "no-cache")
        self.set_header("X-Accel-Buffering", "no")

    def error_payload(self, exc: MnnEngineError) -> dict[str, Any]:
        """The body of an error answer (OpenAI's shape; the Ollama routes add theirs)."""
        return error_body(exc.code, exc.message, exc.param)

    def send_engine_error(self, exc: MnnEngineError) -> None:
        if exc.code == "busy":
            self.set_header("Retry-After", "1")
            if self.ctx.metrics is not None:
                self.ctx.metrics.busy.inc()
        elif exc.code == "unauthorized":
            self.set_header("WWW-Authenticate", 'Bearer realm="mnn-engine"')
        self.send_json(self.error_payload(exc), exc.kind.http_status)

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        exc = kwargs.get("exc_info", (None, None, None))[1]
        if isinstance(exc, StreamClosedError) or self.request.connection.stream.closed():
            return  # the client is gone (or its request was malformed): nobody to answer
        if isinstance(exc, MnnEngineError):
            self.send_engine_error(exc)
            return
        code = {404: "not_found", 405: "method_not_allowed", 413: "payload_too_large"}.get(status_code)
        if code is None and 400 <= status_code < 500:
            code = "invalid_argument"
        if code is None:
            code = "internal_error"
            log.error("internal error on %s %s", self.request.method, self.request.path,
                      exc_info=kwargs.get("exc_info"))
        message = self._reason if code == "invalid_argument" else ERROR_CODES[code].meaning
        self.send_json(self.error_payload(MnnEngineError(code, message)), status_code)

    def log_exception(self, typ: Any, value: Any, tb: Any) -> None:
        if isinstance(value, (MnnEngineError, tornado.web.HTTPError, StreamClosedError)):
            return  # answered as JSON; nothing went wrong inside
        super().log_exception(typ, value, tb)


class NotFoundHandler(JsonHandler):
    def prepare(self) -> None:
        self._check_host_and_origin()  # an unknown path is 404 with or without the key
        raise MnnEngineError("not_found", f"no route {self.request.method} {self.request.path}")


def log_request(handler: tornado.web.RequestHandler) -> None:
    """The access log line (``serve --access-log``): Tornado's, with the request ID."""
    status = handler.get_status()
    log_method = access_log.info if status < 400 else access_log.warning if status < 500 else access_log.error
    request = handler.request
    log_method("%d %s %s (%s) %.2fms id=%s", status, request.method, request.uri, request.remote_ip,
               1000.0 * request.request_time(), getattr(handler, "request_id", "") or "-")


class HealthHandler(JsonHandler):
    """Engine, model, server and generation state (public: no secrets). In a
    server of the store, ``model`` is the one in front (the default when
    loaded, else the one used last), ``loaded`` every loaded one, and
    ``loading`` the load in progress (MNN reports no progress while it loads)."""

    def get(self) -> None:
        models = self.ctx.models
        snap = models.snapshot()
        model = {k: snap["model"].get(k) for k in ("state", "id", "options", "context_length", "kind", "speculative")}
        model["context_limit"] = model["context_length"]  # the field's older name, kept for clients that read it
        model["name"] = served_name(snap["model"]["id"], snap["model"]["path"]) \
            if snap["model"]["state"] == "loaded" else None
        model["capabilities"] = []
        engine = dict(models.loaded_engines()).get(model["name"] or "")
        with contextlib.suppress(MnnEngineError):  # unloaded meanwhile: none
            if engine is not None:
                model["capabilities"] = engine.loaded_model.capabilities
        if models.switching:
            status = "stopping" if self.ctx.stopping else "ok"
        else:
            status = "stopping" if self.ctx.stopping else ("ok" if model["state"] == "loaded" else "no_model")
        self.send_json({
            "status": status,
            "version": __version__,
            "engine": snap["engine"],
            "model": model,
            "models": {"switching": models.switching, "max_loaded": models.max_loaded,
                       "default": models.default_name, "loaded": snap.get("loaded", []),
                       "loading": snap.get("loading")},
            "server": {"state": snap["server"]["state"], "uptime_s": round(time.time() - self.ctx.started, 1),
                       "auth": bool(self.ctx.settings.api_key)},
            "generation": snap["generation"],
            "queue": None if self.ctx.queue is None else {"limit": self.ctx.queue.limit,
                                                          "waiting": self.ctx.queue.depth,
                                                          "timeout_s": self.ctx.queue.timeout},
            "last_error": snap["last_error"],
        })


class OpenApiHandler(JsonHandler):
    def get(self) -> None:
        self.send_json(openapi_spec())


def openai_models(models: ServedModels) -> list[dict[str, Any]]:
    """Every served model as OpenAI's ``Model`` object, with what it is
    beside it: kind, loaded, context length, capabilities (Ollama's names).
    Reads the models' files: run off the IOLoop."""
    data = []
    for entry in models.models():
        facts = models.facts(entry["name"])
        data.append({"id": entry["name"], "object": "model", "created": int(entry["created"]),
                     "owned_by": "mnn-engine", "kind": entry["kind"], "loaded": entry["loaded"],
                     "context_length": entry["context_length"],
                     "capabilities": facts.capabilities})
    return data


class ModelsHandler(JsonHandler):
    """``GET /v1/models`` (the list: every model served, loaded or not) and
    ``GET /v1/models/{id}`` (the SDK's ``models.retrieve``), in OpenAI's shape,
    or Anthropic's for a client that sends ``anthropic-version`` (its SDK does)."""

    async def get(self, model: str | None = None) -> None:
        data = await asyncio.wrap_future(self.ctx.text_work.submit(openai_models, self.ctx.models))
        anthropic = "anthropic-version" in self.request.headers
        if model is None:
            self.send_json(model_list(data) if anthropic else {"object": "list", "data": data})
            return
        name = urllib.parse.unquote(model)
        found = [m for m in data if m["id"] == name]
        if not found:
            with contextlib.suppress(MnnEngineError):
                resolved = self.ctx.models.resolve(name)
                found = [m for m in data if m["id"] == resolved]
        if not found:
            raise MnnEngineError("model_not_found", f"The model '{name}' does not exist", param="model")
        self.send_json(model_info(found[0]) if anthropic else found[0])

    def error_payload(self, exc: MnnEngineError) -> dict[str, Any]:
        if "anthropic-version" in self.request.headers:
            return anthropic_error(exc)
        return super().error_payload(exc)


@tornado.web.stream_request_body
class BodyHandler(JsonHandler):
    """A POST route with a JSON body, read within the server's size limit
    (``parse_body``), and the generation it may start: cancelled when the
    client goes away or the server stops."""

    # Class defaults, not set in prepare(): a request refused before them (401,
    # 403) still gets on_connection_close and on_finish, which read them.
    #: the running generation's future (engine.submit), set by the route's GenerationSession
    generation: Any = None
    #: the client went away
    closed = False
    _too_large = False
    #: the served name of the model the request named (``choose_model``)
    model_name: str | None = None
    #: that model's engine, leased for the request's turn (``lease_model``)
    engine: ServedEngine | None = None
    _lease: ModelLease | None = None
    #: how long the model stays loaded after this request (Ollama's keep_alive; ...: the server's default)
    keep_alive: Any = ...

    def prepare(self) -> None:
        self._body = bytearray()
        super().prepare()
        length = self.request.headers.get("Content-Length")
        if length is not None and length.isdigit() and int(length) > self.ctx.settings.max_body_bytes:
            raise self._too_large_error()
        # Tornado cuts a body off at its own limit with a bare 400; ours comes first
        self.request.connection.set_max_body_size(2 * self.ctx.settings.max_body_bytes + 1)

    async def off_loop(self, parse: Callable[..., T], *args: Any) -> T:
        """``parse(*args)`` on a worker thread: a request's parsing decodes its images in full
        (runtime/image_decode.py), which must not hold the IOLoop."""
        return await asyncio.wrap_future(self.ctx.text_work.submit(parse, *args))

    def _too_large_error(self) -> MnnEngineError:
        limit = self.ctx.settings.max_body_bytes
        return MnnEngineError("payload_too_large", f"the request body is larger than {limit} bytes")

    def data_received(self, chunk: bytes) -> None:
        if self._too_large or len(self._body) + len(chunk) > self.ctx.settings.max_body_bytes:
            self._too_large = True  # a chunked body: refused (413) once it has been read
            return
        self._body.extend(chunk)

    def parse_body(self) -> Any:
        if self._too_large:
            raise self._too_large_error()
        content_type = self.request.headers.get("Content-Type", "").split(";")[0].strip().lower()
        if content_type.startswith("multipart/"):
            raise MnnEngineError("unsupported_media_type",
                                 f"the body must be JSON (Content-Type: application/json), not {content_type}")
        try:
            text = bytes(self._body).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise invalid("body", f"is not valid UTF-8 (byte {exc.start})") from exc
        if not text.strip():
            raise invalid("body", "is empty: send a JSON object")
        try:
            body = jsonutil.loads(text)
        except RecursionError as exc:
            raise invalid("body", "is nested too deeply") from exc
        except ValueError as exc:
            # Whatever the declared type: Ollama's docs post JSON with curl -d, which declares a form
            # (application/x-www-form-urlencoded), and Ollama and llama-server read it as JSON anyway.
            if content_type == "application/x-www-form-urlencoded" and FORM_PAIRS.match(text):
                raise invalid("body", "is a form (name=value pairs), not JSON: send a JSON object") from exc
            raise invalid("body", f"is not valid JSON: {exc}") from exc
        if jsonutil.depth(body, MAX_JSON_DEPTH) > MAX_JSON_DEPTH:
            raise invalid("body", f"is nested more than {MAX_JSON_DEPTH} levels deep")
        return body

    def choose_model(self, body: Any, *, strict: bool = False) -> str:
        """The served name of the model ``body``'s ``model`` names (see
        ``ServedModels.resolve``; ``strict``: Ollama's routes, where a name
        must name it even with one model); refusals first."""
        if self.ctx.stopping:
            raise MnnEngineError("server_stopping", "the server is stopping; no new requests")
        asked = body.get("model") if isinstance(body, Mapping) else None
        self.model_name = self.ctx.models.resolve(asked, strict=strict)
        return self.model_name

    async def model_facts(self) -> Any:
        """What the chosen model is (``ModelFacts``), read off the IOLoop (once per model)."""
        return await asyncio.wrap_future(self.ctx.text_work.submit(self.ctx.models.facts, self.model_name))

    async def lease_model(self) -> ServedEngine:
        """Lease the chosen model until the request ends: at once when it is
        loaded, else after its load on the load thread (its failure is this
        request's error)."""
        assert self.model_name is not None
        lease = self.ctx.models.try_acquire(self.model_name)
        if lease is None:
            timeout = self.ctx.queue.timeout if self.ctx.queue is not None else DEFAULT_QUEUE_TIMEOUT
            future = self.ctx.loads.submit(self.ctx.models.acquire, self.model_name, timeout)
            try:
                lease = await asyncio.wrap_future(future)
            except asyncio.CancelledError:  # the server stopped meanwhile: the lease, when it comes, goes back
                future.add_done_callback(lambda f: f.exception() is None and f.result().release())
                raise
        self._lease, self.engine = lease, lease.engine
        if self.closed:  # its lease goes back now: nothing is written to a client that left
            self.release_model()
            raise MnnEngineError("generation_cancelled", "the client left while its model loaded")
        return lease.engine

    def release_model(self) -> None:
        """The request is done with its model (idempotent): it expires after the keep-alive."""
        if self._lease is not None:
            self._lease.release(self.keep_alive)

    @contextlib.asynccontextmanager
    async def leased(self) -> AsyncIterator[ServedEngine]:
        """The chosen model's engine for a route that only reads it (tokenize, detokenize). A
        loaded model is leased at once, outside the generation queue: a lease keeps it loaded and
        evicts nothing. A model that must be loaded first (which may unload another, idle one)
        waits for the queue's turn as a generation's load does, and gives the turn back once
        loaded: these routes once loaded and evicted models outside the turn."""
        assert self.model_name is not None
        try:
            lease = self.ctx.models.try_acquire(self.model_name)
            if lease is not None:
                self._lease, self.engine = lease, lease.engine
                yield lease.engine
            else:
                async with self.exclusive_turn() as engine:
                    pass
                yield engine
        finally:
            self.release_model()

    @contextlib.asynccontextmanager
    async def exclusive_turn(self) -> AsyncIterator[ServedEngine]:
        """The generation queue's turn without a generation: no generation runs on any model
        while the block does (``/apply-template`` sets MNN's template config, which a running
        generation reads). The turn goes to the next in line when the block ends; the lease
        stays until the request ends."""
        try:
            async with self.generation_turn() as engine:
                yield engine
        finally:
            self.end_turn()

    async def first_piece(self, pieces: Any) -> str | None:
        """The generation's first piece of text (None when it made none). The
        first piece submits the generation: a refusal (busy, bad options, a
        prompt too long) or a failure before any text is raised here, while
        the answer can still be a plain HTTP error."""
        first = await anext(pieces, None)
        if first is None and self.generation is not None and self.generation.done() and not self.closed:
            self.check_not_cancelled(self.generation.result())
        return first

    async def send_event(self, data: Any, name: str | None = None) -> None:
        """One server-sent event (``name``: its ``event:`` line, which Anthropic's and the Responses API's
        streams carry)."""
        head = b"event: " + name.encode() + b"\n" if name else b""
        await self.send_now(head + b"data: " + jsonutil.dumps(data) + b"\n\n")

    async def send_now(self, payload: bytes) -> None:
        """Write and flush a piece of a streamed answer (nothing once the client is gone)."""
        if self.closed:
            return
        self.write(payload)
        try:
            await self.flush()
        except StreamClosedError:
            self._client_gone()

    async def send_error_event(self, exc: MnnEngineError) -> None:
        """A failure after a server-sent-events answer started (OpenAI's shape, in the stream)."""
        await self.send_event(error_body(exc.code, exc.message))

    def end_events(self) -> None:
        if not self.closed:
            self.write(b"data: [DONE]\n\n")
            self.finish()

    @contextlib.asynccontextmanager
    async def generation_turn(self) -> AsyncIterator[ServedEngine]:
        """Around a route's generation: it counts as active (the server cancels
        it when stopping), waits its turn in the queue (``serve --queue``),
        leases its model (loading it if need be), and a generation still
        running when the route ends is cancelled. Yields the model's engine."""
        self.ctx.active.add(self)
        try:
            if self.ctx.queue is not None:
                await self.ctx.queue.turn(self)
            yield await self.lease_model()
        finally:
            self.ctx.active.discard(self)
            if self.generation is not None and not self.generation.done() and self.engine is not None:
                self.engine.cancel_generation()
            # the lease lasts until the answer is written (on_finish): its last frames still use the model

    def end_turn(self) -> None:
        """Give the queue's turn (or place) back without a generation: the next in line goes."""
        if self.ctx.queue is not None:
            self.ctx.queue.release(self)

    def gone(self) -> bool:
        """The client left or the server is stopping: work for this request can stop."""
        return self.closed or self.ctx.stopping

    async def embed(self, inputs: Any, *, normalize: bool = True, truncate: bool = False,
                    check: Any = None) -> EmbeddingResult:
        """Embed on the engine's thread (see ``Engine.submit_embed``) in the
        route's generation turn; ``check(llm)`` runs first, once the model is there."""
        async with self.generation_turn() as engine:
            if check is not None:
                check(engine.loaded_model)
            self.generation = engine.submit_embed(inputs, normalize=normalize, truncate=truncate)
            try:
                return await asyncio.wrap_future(self.generation)
            except MnnEngineError as exc:
                if exc.code == "generation_cancelled" and self.ctx.stopping:
                    raise MnnEngineError("server_stopping", "the server stopped during the request") from exc
                raise

    def on_finish(self) -> None:
        super().on_finish()
        self.release_model()
        if self.ctx.queue is not None:
            self.ctx.queue.release(self)

    def _client_gone(self) -> None:
        if self.ctx.queue is not None:
            self.ctx.queue.release(self)
        self.release_model()
        self.closed = True
        if self.generation is not None and not self.generation.done() and self.engine is not None:
            log.info("client went away; cancelling its generation")
            self.engine.cancel_generation()

    def on_connection_close(self) -> None:
        self._client_gone()

    def cancel(self) -> None:
        """Called when the server stops."""
        if self.generation is not None and not self.generation.done() and self.engine is not None:
            self.engine.cancel_generation()

    def check_not_cancelled(self, result: GenerationResult) -> None:
        """A cancelled generation is never reported as a normal stop."""
        if result.finish_reason == "cancelled":
            raise self.cancelled_error()

    def cancelled_error(self) -> MnnEngineError:
        """What a request's generation (or scoring) that ended cancelled answers."""
        if self.ctx.stopping:
            return MnnEngineError("server_stopping", "the server stopped during the generation")
        return MnnEngineError("generation_cancelled", "the generation was cancelled on the server")


class ChatCompletionsHandler(BodyHandler):
    """POST /v1/chat/completions, streamed (SSE) or not."""

    async def post(self) -> None:
        body = self.parse_body()
        model = self.choose_model(body)
        facts = await self.model_facts()
        policy = MediaPolicy(model_is_visual=facts.is_visual, model_is_audio=facts.is_audio,
                             allow_file_urls=self.ctx.settings.allow_file_urls)
        request = await self.off_loop(parse_chat_request, body, policy)
        try:
            await self._complete(model, request)
        finally:
            request.cleanup()

    async def _complete(self, model: str, request: ChatRequest) -> None:
        session = GenerationSession.of_chat(self, request)
        completion = Completion(model=model, fingerprint=self.ctx.fingerprint)
        if not request.stream:
            outcome = await session.whole()
            if outcome is None:
                return
            self._dropped_header(outcome.dropped)
            result = outcome.result
            self.send_json(completion.response(message_from(outcome.deltas), finish_reason(result, outcome.tool_calls),
                                               result.usage, logprobs_object(result.logprobs, outcome.token_bytes)))
            return

        async def start() -> None:
            self._dropped_header(session.dropped)
            self.start_events()
            await self.send_event(completion.chunk({"role": "assistant", "content": ""}))

        async def emit(deltas: list[Delta]) -> None:
            for delta in deltas:
                await self.send_event(completion.chunk(delta_dict(delta)))

        outcome = await session.stream(start, emit, self.send_error_event)
        if outcome is not None:
            result = outcome.result
            await self.send_event(completion.chunk({}, finish_reason(result, outcome.tool_calls),
                                                   logprobs_object(result.logprobs, outcome.token_bytes)))
            if request.include_usage:
                await self.send_event(completion.usage_chunk(result.usage))
        self.end_events()

    def _dropped_header(self, dropped: int) -> None:
        if dropped:
            self.set_header("X-Context-Dropped-Messages", str(dropped))
