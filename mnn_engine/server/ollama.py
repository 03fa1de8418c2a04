"""Ollama's API, for the clients that speak it (Open WebUI, many Android apps,
editor plugins): ``/api/version``, ``/api/tags``, ``/api/show``, ``/api/ps``,
``/api/chat`` and ``/api/generate`` (NDJSON streams, ``options`` mapped to our
sampling, ``format`` through structured output, ``think``), ``/api/pull``
through the store's pull, and ``/api/embed`` (with the older ``/api/embeddings``)
from a text-embedding model.

A request's ``model`` names the model, as in Ollama: 400 without one, 404
for one the server does not serve (with one model only, ``--no-switch``, it
must name that one). ``/api/tags`` lists every model served, ``/api/ps`` the
loaded ones with their expiry; ``keep_alive`` (seconds or a Go duration;
negative: forever) says how long a model stays loaded after the request, and
``keep_alive: 0`` with nothing to generate unloads it. Errors keep this
server's JSON shape with Ollama's ``error`` text on top: ``{"error": "...", ...}``.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import threading
import time
from collections.abc import Callable, Mapping
from datetime import datetime, timezone
from typing import Any

from tornado.ioloop import IOLoop

from .. import jsonutil
from ..api.embeddings import dimensions_field, shortened
from ..api.ollama import (
    OLLAMA_VERSION,
    chat_request,
    durations,
    keep_alive_field,
    now,
    openai_messages,
    split_deltas,
    stream_flag,
    tagged,
)
from ..api.openai_chat import ChatRequest, MediaPolicy
from ..checks import boolean, invalid, obj, string
from ..engine.listing import model_details
from ..errors import MnnEngineError
from ..hub.sources import UrlPolicy
from ..runtime.generation import GenerationResult
from .app import BodyHandler, JsonHandler, error_body
from .session import GenerationSession

log = logging.getLogger("mnn_engine.server")


def _iso(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp, timezone.utc).isoformat().replace("+00:00", "Z")


#: what /api/ps shows for a model that never expires (keep_alive < 0, or while it is in use)
FOREVER = "9999-12-31T23:59:59Z"


def _model_entry(models: Any, entry: Mapping[str, Any]) -> dict[str, Any]:
    """An entry of /api/tags and /api/ps (reads the model's files: run off the IOLoop)."""
    facts = models.facts(entry["name"])
    key = f"{entry['id']}:{entry['created']}" if entry["id"] else entry["name"]
    name = tagged(entry["name"])
    return {"name": name, "model": name, "modified_at": _iso(entry["created"]), "size": entry["size_bytes"],
            "digest": hashlib.sha256(key.encode()).hexdigest(), "details": model_details(facts)[0]}


def _listing(models: Any, loaded_only: bool) -> list[dict[str, Any]]:
    out = []
    for entry in models.models():
        if loaded_only and not entry["loaded"]:
            continue
        item = _model_entry(models, entry)
        if loaded_only:
            item.update(expires_at=FOREVER if entry["expires_at"] is None else _iso(entry["expires_at"]),
                        size_vram=0, context_length=entry["context_length"])
        out.append(item)
    return out


class OllamaHandler(JsonHandler):
    """Ollama's errors: ``{"error": message}`` (and this server's fields beside it)."""

    def error_payload(self, exc: MnnEngineError) -> dict[str, Any]:
        if exc.param == "response_format":  # the engine's name for what Ollama calls format
            exc = MnnEngineError(exc.code, "format" + exc.message.removeprefix("response_format"), param="format")
        return {**error_body(exc.code, exc.message, exc.param), "error": exc.message, "code": exc.code}


class VersionHandler(OllamaHandler):
    def get(self) -> None:
        from .. import __version__

        self.send_json({"version": OLLAMA_VERSION, "mnn_engine": __version__})


class TagsHandler(OllamaHandler):
    """Every model served, loaded or not."""

    async def get(self) -> None:
        models = await asyncio.wrap_future(self.ctx.text_work.submit(_listing, self.ctx.models, False))
        self.send_json({"models": models})


class PsHandler(OllamaHandler):
    """The loaded models, with when each expires (``keep_alive``)."""

    async def get(self) -> None:
        models = await asyncio.wrap_future(self.ctx.text_work.submit(_listing, self.ctx.models, True))
        self.send_json({"models": models})


class OllamaBodyHandler(BodyHandler, OllamaHandler):
    """A POST route of Ollama's, and NDJSON streams."""

    def model_named_in(self, body: Any) -> str:
        """The served name of the model ``body`` names: as Ollama, 400
        without a model and 404 for a model it does not serve. Its
        ``keep_alive`` holds for the model after this request."""
        asked = body.get("model") if isinstance(body, Mapping) else None
        if asked is None or asked == "":
            raise invalid("model", "model is required", verbatim=True)  # Ollama's words
        string(asked, "model")
        self.keep_alive = keep_alive_field(body)
        return self.choose_model(body, strict=True)

    async def send_line(self, data: Any) -> None:
        await self.send_now(jsonutil.dumps(data) + b"\n")

    async def send_error_line(self, exc: MnnEngineError) -> None:
        """A failure after an NDJSON answer started (Ollama's ``error``, and this server's code and status)."""
        await self.send_line({"error": exc.message, "code": exc.code, "http_status": exc.kind.http_status})


class ShowHandler(OllamaBodyHandler):
    """A model's facts, from its files (it is not loaded for this)."""

    async def post(self) -> None:
        name = self.model_named_in(self.parse_body())
        facts = await self.model_facts()
        details, count = await asyncio.wrap_future(self.ctx.text_work.submit(model_details, facts))
        context = (await asyncio.wrap_future(self.ctx.text_work.submit(self.ctx.models.model, name)))["context_length"]
        architecture = str(facts.config.get("model_type", "")) or "mnn"
        self.send_json({"modelfile": "", "parameters": "", "template": "", "details": details,
                        # Ollama's key is <architecture>.context_length (e.g. qwen3.context_length): tools read it
                        "model_info": {"general.architecture": architecture, "general.parameter_count": count,
                                       f"{architecture}.context_length": context, "context_length": context},
                        "capabilities": facts.capabilities,
                        "modified_at": _iso(facts.created), "name": tagged(name)})


class _Generation(OllamaBodyHandler):
    """What /api/chat and /api/generate share: the generation, streamed as
    NDJSON (the default) or answered whole."""

    async def generate(self, prompt: Any, request: ChatRequest, stream: bool, frame: Any,
                       done: Callable[[GenerationResult], dict[str, Any]] = lambda result: {},
                       **options: Any) -> None:
        """``frame(content, thinking, tool_calls)`` makes one line's payload,
        ``done(result)`` what the last line adds; ``options`` go to the engine too."""
        started = time.perf_counter()
        # Ollama's tool calls go out whole (its NDJSON lines have no argument deltas)
        session = GenerationSession.of_chat(self, request, prompt, stream_tool_arguments=False, **options)
        if not stream:
            outcome = await session.whole()
            if outcome is not None:
                self.send_json({**frame(*split_deltas(outcome.deltas)), **durations(outcome.result, started),
                                **done(outcome.result)})
            return

        async def start() -> None:
            self.set_header("Content-Type", "application/x-ndjson")

        async def emit(deltas: list[Any]) -> None:
            for delta in deltas:
                content, thinking, calls = split_deltas([delta])
                await self.send_line({**frame(content, thinking, calls), "done": False})

        outcome = await session.stream(start, emit, self.send_error_line)
        if outcome is not None:
            await self.send_line({**frame("", "", None), **durations(outcome.result, started), **done(outcome.result)})
        if not self.closed:
            self.finish()

    async def begin(self) -> tuple[str, Mapping[str, Any], bool, MediaPolicy]:
        """What both routes check first: the model, the body, whether to stream, the image policy."""
        body = self.parse_body()
        obj(body, "body")
        model = self.model_named_in(body)
        facts = await self.model_facts()
        return model, body, stream_flag(body), MediaPolicy(model_is_visual=facts.is_visual, allow_file_urls=False)

    async def load_only(self, model: str, frame: dict[str, Any]) -> None:
        """docs/api.md: a request with nothing to generate loads the model
        (``done_reason`` "load"), or with ``keep_alive: 0`` unloads it ("unload";
        a one-model server, ``--no-switch``, keeps its model: "load")."""
        if self.keep_alive == 0 and self.ctx.models.switching:
            await asyncio.wrap_future(self.ctx.loads.submit(self.ctx.models.unload, model))
            reason = "unload"
        else:
            async with self.generation_turn():  # loads it in its turn, as a generation would
                pass
            reason = "load"
        self.send_json({"model": tagged(model), "created_at": now(), **frame, "done": True, "done_reason": reason})


class ChatHandler(_Generation):
    async def post(self) -> None:
        model, body, stream, policy = await self.begin()
        if not body.get("messages"):  # docs/api.md: no messages only load (or unload) the model
            await self.load_only(model, {"message": {"role": "assistant", "content": ""}})
            return
        request = await self.off_loop(chat_request, body, openai_messages(body.get("messages")), policy)

        def frame(content: str, thinking: str, calls: Any) -> dict[str, Any]:
            message: dict[str, Any] = {"role": "assistant", "content": content}
            if thinking:
                message["thinking"] = thinking
            if calls:
                message["tool_calls"] = calls
            return {"model": tagged(model), "created_at": now(), "message": message}

        try:
            await self.generate(request.messages, request, stream, frame)
        finally:
            request.cleanup()


class GenerateHandler(_Generation):
    async def post(self) -> None:
        model, body, stream, policy = await self.begin()
        prompt = body.get("prompt", "")
        if not isinstance(prompt, str):
            raise invalid("prompt", "must be text")
        if not prompt:  # docs/api.md: an empty prompt only loads (or unloads) the model
            await self.load_only(model, {"response": ""})
            return
        if body.get("suffix"):
            raise invalid("suffix", "is not supported")
        raw = body.get("raw", False)
        messages: list[dict[str, Any]] = []
        if isinstance(body.get("system"), str) and body["system"]:
            messages.append({"role": "system", "content": body["system"]})
        user: dict[str, Any] = {"role": "user", "content": prompt}
        if body.get("images"):
            user["images"] = body["images"]
        messages.append(user)
        request = await self.off_loop(chat_request, {k: v for k, v in body.items() if k != "tools"},
                                      openai_messages(messages), policy)
        if raw:
            request.enable_thinking = None  # the prompt is used as it is: no template to tell

        def frame(content: str, thinking: str, _calls: Any) -> dict[str, Any]:
            line: dict[str, Any] = {"model": tagged(model), "created_at": now(), "response": content}
            if thinking:
                line["thinking"] = thinking
            return line

        context = body.get("context")  # checked by the model, as every token id is (param "context")

        def done(result: GenerationResult) -> dict[str, Any]:
            # docs/api.md: the token context of this exchange; sent back, the next generation continues it
            return {"context": [*result.prompt_ids, *result.token_ids]}

        try:
            await self.generate(prompt if raw else request.messages, request, stream, frame, done,
                                prefix_ids=() if context is None else context)
        finally:
            request.cleanup()


class PullHandler(OllamaBodyHandler):
    """Pull through the store: a catalog name (``qwen3-0.6b``, also written
    ``qwen3:0.6b``), ``hf:ORG/NAME``, ``modelscope:ORG/NAME`` or a manifest URL.
    The pulled model is in the store, and a server of the store serves it by name at once."""

    async def post(self) -> None:
        body = self.parse_body()
        if not isinstance(body, Mapping) or not isinstance(body.get("model") or body.get("name"), str):
            raise invalid("model", "must name what to pull")
        spec = body.get("model") or body.get("name")
        if ":" in spec and not spec.startswith(("hf:", "modelscope:", "http://", "https://")):
            spec = spec.replace(":", "-")
        stream = stream_flag(body)
        #: keep pulling when the client leaves (else its pull stops at the next chunk, its bytes kept)
        self._background = body.get("background") is True
        loop = IOLoop.current()
        progress: asyncio.Queue[tuple[int, int]] = asyncio.Queue()

        def report(done: int, total: int, _name: str) -> None:
            loop.add_callback(progress.put_nowait, (done, total))

        # a client names the URL: it may reach public https hosts only, unless the operator allows more
        policy = UrlPolicy(public_only=True, allowed=self.ctx.settings.allow_pull_urls)
        self._stop = threading.Event()
        self.ctx.pull_stops.add(self._stop)
        self.ctx.active.add(self)  # a stopping server waits for its answer (an error line or a 503)
        try:
            future = asyncio.wrap_future(self.ctx.pulls.submit(
                lambda: self.ctx.models.pull(spec, progress=report, policy=policy, stop=self._stop)))
            if not stream:
                try:
                    info = await future
                except MnnEngineError as exc:
                    raise self._stopped_or(exc) from exc
                self.send_json({"status": "success", "model": info.id})
                return
            await self._stream_pull(spec, future, progress)
        finally:
            self.ctx.pull_stops.discard(self._stop)
            self.ctx.active.discard(self)

    def cancel(self) -> None:
        """The server stops: the pull ends at its next chunk or read (its bytes kept)."""
        self._stop.set()

    def _stopped_or(self, exc: MnnEngineError) -> MnnEngineError:
        """A pull stopped because the server stops says so (it resumes on the next pull)."""
        if exc.code == "pull_cancelled" and self.ctx.stopping:
            return MnnEngineError("server_stopping", "the server stopped during the pull; pull again to resume it",
                                  param="model")
        return exc

    async def _stream_pull(self, spec: str, future: asyncio.Future[Any], progress: asyncio.Queue[Any]) -> None:
        """Ollama's NDJSON progress; every failure ends it with an error object and its HTTP status."""
        self.set_header("Content-Type", "application/x-ndjson")
        await self.send_line({"status": "pulling manifest"})
        last = 0.0
        while not future.done():
            try:
                done, total = await asyncio.wait_for(progress.get(), 0.25)
            except asyncio.TimeoutError:
                continue
            if time.monotonic() - last >= 0.25 or done >= total:
                last = time.monotonic()
                await self.send_line({"status": f"pulling {spec}", "digest": spec, "total": total,
                                      "completed": done})
        try:
            info = future.result()
        except Exception as exc:  # any failure, expected or not, ends the stream with an error
            error = self._stopped_or(exc) if isinstance(exc, MnnEngineError) else \
                MnnEngineError("internal_error", "the pull failed unexpectedly (see the server log)")
            if not isinstance(exc, MnnEngineError):
                log.error("pull of %s failed", spec, exc_info=exc)
            await self.send_error_line(error)
        else:
            await self.send_line({"status": "verifying sha256 digest"})
            await self.send_line({"status": "success", "model": info.id})
        if not self.closed:
            self.finish()

    def on_connection_close(self) -> None:
        super().on_connection_close()
        stop = getattr(self, "_stop", None)
        if stop is not None and not getattr(self, "_background", False):
            stop.set()


class EmbedHandler(OllamaBodyHandler):
    """``/api/embed``: ``input`` a text or a list of texts; unit-length vectors;
    ``truncate`` (default true) cuts an input longer than the context instead
    of refusing it; ``dimensions`` keeps the first N values."""

    async def post(self) -> None:
        body = self.parse_body()
        obj(body, "body")
        model = self.model_named_in(body)
        inputs = body.get("input")
        if not isinstance(inputs, str) and not (isinstance(inputs, list) and all(isinstance(t, str) for t in inputs)):
            raise invalid("input", "must be a string or a list of strings")
        truncate = boolean(body.get("truncate", True), "truncate")
        dimensions = dimensions_field(body)
        started = time.perf_counter()
        result = await self.embed(inputs, truncate=truncate)
        vectors = result.vectors
        if dimensions is not None and dimensions < result.dim:
            vectors = [shortened(v, dimensions) for v in vectors]
        self.send_json({"model": model, "embeddings": vectors,
                        "total_duration": int((time.perf_counter() - started) * 1e9), "load_duration": 0,
                        "prompt_eval_count": result.prompt_tokens})


class LegacyEmbeddingsHandler(OllamaBodyHandler):
    """``/api/embeddings`` (Ollama's older route): one ``prompt``, the vector as
    the model gives it (not scaled to unit length, as Ollama's is not)."""

    async def post(self) -> None:
        body = self.parse_body()
        self.model_named_in(body)
        prompt = string(obj(body, "body").get("prompt"), "prompt")
        result = await self.embed(prompt, normalize=False)
        self.send_json({"embedding": result.vectors[0]})


def routes(ctx: Any) -> list[tuple[str, type, dict[str, Any]]]:
    return [(r"/api/version", VersionHandler, {"ctx": ctx}), (r"/api/tags", TagsHandler, {"ctx": ctx}),
            (r"/api/ps", PsHandler, {"ctx": ctx}), (r"/api/show", ShowHandler, {"ctx": ctx}),
            (r"/api/chat", ChatHandler, {"ctx": ctx}), (r"/api/generate", GenerateHandler, {"ctx": ctx}),
            (r"/api/pull", PullHandler, {"ctx": ctx}), (r"/api/embed", EmbedHandler, {"ctx": ctx}),
            (r"/api/embeddings", LegacyEmbeddingsHandler, {"ctx": ctx})]
