"""Ollama's API, for the clients that speak it (Open WebUI, many Android apps,
editor plugins): ``/api/version``, ``/api/tags``, ``/api/show``, ``/api/ps``,
``/api/chat`` and ``/api/generate`` (NDJSON streams, ``options`` mapped to our
sampling, ``format`` through structured output, ``think``), ``/api/pull``
through the store's pull, and ``/api/embed`` (with the older ``/api/embeddings``)
from a text-embedding model.

The loaded model answers whatever ``model`` a request names, as on the
OpenAI routes; ``keep_alive`` is accepted and the model stays loaded while the
server runs. Errors keep this server's JSON shape with Ollama's ``error`` text
on top: ``{"error": "...", ...}``.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from tornado.ioloop import IOLoop

from .. import jsonutil
from ..api.embeddings import dimensions_field, shortened
from ..api.ollama import (
    OLLAMA_VERSION,
    chat_request,
    durations,
    names_the_model,
    now,
    openai_messages,
    split_deltas,
    stream_flag,
    tagged,
)
from ..api.openai_chat import ChatRequest, ImagePolicy
from ..errors import MnnEngineError, invalid
from ..hub.sources import UrlPolicy
from ..runtime.generation import GenerationResult
from ..runtime.model_files import parameter_count, parameter_size
from .app import BodyHandler, JsonHandler, active_model_name, error_body, model_capabilities
from .session import GenerationSession

log = logging.getLogger("mnn_engine.server")


def _quantization(model_dir: Path) -> str:
    """The weights' quantisation as llmexport recorded it (``export_args.json``:
    ``quant_bit``, ``quant_block``), e.g. ``Q4_B64``; "" when not recorded."""
    try:
        args = json.loads((model_dir / "export_args.json").read_text())
    except (OSError, ValueError):
        return ""
    bits, block = (args.get("quant_bit"), args.get("quant_block")) if isinstance(args, dict) else (None, None)
    if not isinstance(bits, int) or isinstance(bits, bool):
        return ""
    return f"Q{bits}" + (f"_B{block}" if isinstance(block, int) and not isinstance(block, bool) and block else "")


def _facts(llm: Any) -> tuple[dict[str, Any], int]:
    """Ollama's ``details`` of a model and its parameter count, from its files
    (reads the graph once: run off the IOLoop)."""
    family = str(llm.file_config.get("model_type", ""))
    count = parameter_count(llm.config_path, llm.file_config)
    return ({"parent_model": "", "format": "mnn", "family": family, "families": [family] if family else None,
             "parameter_size": parameter_size(count), "quantization_level": _quantization(llm.model_dir)}, count)


def _directory_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.iterdir() if f.is_file())


def _model_entry(engine: Any, name: str) -> dict[str, Any]:
    """An entry of /api/tags and /api/ps (reads the model's files: run off the IOLoop)."""
    snap = engine.snapshot()["model"]
    size = 0
    digest = hashlib.sha256(name.encode()).hexdigest()
    if snap.get("id"):
        info = engine.store.get(snap["id"])
        size = info.size_bytes
        digest = hashlib.sha256(f"{info.id}:{info.created}".encode()).hexdigest()
    else:  # served from a directory
        size = _directory_bytes(engine.llm.model_dir)
    return {"name": tagged(name), "model": tagged(name), "modified_at": now(), "size": size, "digest": digest,
            "details": _facts(engine.llm)[0]}


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
    async def get(self) -> None:
        name = active_model_name(self.ctx.engine)
        entries = [] if name is None else [
            await asyncio.wrap_future(self.ctx.text_work.submit(_model_entry, self.ctx.engine, name))]
        self.send_json({"models": entries})


class PsHandler(OllamaHandler):
    async def get(self) -> None:
        name = active_model_name(self.ctx.engine)
        if name is None:
            self.send_json({"models": []})
            return
        entry = await asyncio.wrap_future(self.ctx.text_work.submit(_model_entry, self.ctx.engine, name))
        entry.update(expires_at="9999-12-31T23:59:59Z", size_vram=0,
                     context_length=self.ctx.engine.llm.context_limit)
        self.send_json({"models": [entry]})


class OllamaBodyHandler(BodyHandler, OllamaHandler):
    """A POST route of Ollama's, and NDJSON streams."""

    def model_named_in(self, body: Any, name: str) -> str:
        """``name`` (the served model's, from ``require_model``) when ``body``'s
        ``model`` names it: as Ollama, 400 without a model and 404 for a model
        it does not have."""
        asked = body.get("model") if isinstance(body, Mapping) else None
        if asked is None or asked == "":
            raise MnnEngineError("invalid_argument", "model is required", param="model")  # Ollama's words
        if not isinstance(asked, str):
            raise invalid("model", "'model' must be a string")
        if not names_the_model(asked, name, self.ctx.engine.active_model_id):
            raise MnnEngineError("model_not_found", f'model "{asked}" not found, try pulling it first',
                                 param="model")
        return name

    async def send_line(self, data: Any) -> None:
        await self.send_now(jsonutil.dumps(data) + b"\n")

    async def send_error_line(self, exc: MnnEngineError) -> None:
        """A failure after an NDJSON answer started (Ollama's ``error``, and this server's code and status)."""
        await self.send_line({"error": exc.message, "code": exc.code, "http_status": exc.kind.http_status})


class ShowHandler(OllamaBodyHandler):
    async def post(self) -> None:
        name = self.model_named_in(self.parse_body(), self.require_model())
        engine = self.ctx.engine
        architecture = str(engine.llm.file_config.get("model_type", "")) or "mnn"
        capabilities = model_capabilities(engine)
        details, count = await asyncio.wrap_future(self.ctx.text_work.submit(_facts, engine.llm))
        self.send_json({"modelfile": "", "parameters": "", "template": "", "details": details,
                        # Ollama's key is <architecture>.context_length (e.g. qwen3.context_length): tools read it
                        "model_info": {"general.architecture": architecture, "general.parameter_count": count,
                                       f"{architecture}.context_length": engine.llm.context_limit,
                                       "context_length": engine.llm.context_limit},
                        "capabilities": capabilities, "modified_at": now(), "name": tagged(name)})


class _Generation(OllamaBodyHandler):
    """What /api/chat and /api/generate share: the generation, streamed as
    NDJSON (the default) or answered whole."""

    async def generate(self, prompt: Any, request: ChatRequest, stream: bool, frame: Any,
                       done: Callable[[GenerationResult], dict[str, Any]] = lambda result: {},
                       **options: Any) -> None:
        """``frame(content, thinking, tool_calls)`` makes one line's payload,
        ``done(result)`` what the last line adds; ``options`` go to the engine too."""
        started = time.perf_counter()
        session = GenerationSession(self, prompt, parse_tools=request.parse_tools,
                                    enable_thinking=request.enable_thinking, tools=request.tools,
                                    tool_choice=request.tool_choice, **request.sampling, **options)
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

    def begin(self) -> tuple[str, Mapping[str, Any], bool, ImagePolicy]:
        """What both routes check first: the model, the body, whether to stream, the image policy."""
        name = self.require_model()
        body = self.parse_body()
        if not isinstance(body, Mapping):
            raise invalid("body", "the request body must be a JSON object")
        model = self.model_named_in(body, name)
        policy = ImagePolicy(model_is_visual=bool(self.ctx.engine.llm.file_config.get("is_visual")),
                             allow_file_urls=False)
        return model, body, stream_flag(body), policy


class ChatHandler(_Generation):
    async def post(self) -> None:
        model, body, stream, policy = self.begin()
        if body.get("messages") == []:  # docs/api.md: empty messages only load the model (it is loaded)
            self.send_json({"model": tagged(model), "created_at": now(),
                            "message": {"role": "assistant", "content": ""}, "done_reason": "load", "done": True})
            return
        request = chat_request(body, openai_messages(body.get("messages")), policy)

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
        model, body, stream, policy = self.begin()
        prompt = body.get("prompt", "")
        if not isinstance(prompt, str):
            raise invalid("prompt", "'prompt' must be text")
        if not prompt:  # Ollama: an empty prompt only loads the model, which is loaded
            self.send_json({"model": tagged(model), "created_at": now(), "response": "", "done": True,
                            "done_reason": "load"})
            return
        if body.get("suffix"):
            raise invalid("suffix", "'suffix' is not supported")
        raw = body.get("raw", False)
        messages: list[dict[str, Any]] = []
        if isinstance(body.get("system"), str) and body["system"]:
            messages.append({"role": "system", "content": body["system"]})
        user: dict[str, Any] = {"role": "user", "content": prompt}
        if body.get("images"):
            user["images"] = body["images"]
        messages.append(user)
        request = chat_request({k: v for k, v in body.items() if k != "tools"}, openai_messages(messages), policy)
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
    The pulled model is in the store; the server keeps serving the loaded one."""

    async def post(self) -> None:
        body = self.parse_body()
        if not isinstance(body, Mapping) or not isinstance(body.get("model") or body.get("name"), str):
            raise invalid("model", "'model' must name what to pull")
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
        try:
            future = asyncio.wrap_future(self.ctx.pulls.submit(
                lambda: self.ctx.engine.pull(spec, progress=report, policy=policy, stop=self._stop)))
            if not stream:
                info = await future
                self.send_json({"status": "success", "model": info.id})
                return
            await self._stream_pull(spec, future, progress)
        finally:
            self.ctx.pull_stops.discard(self._stop)

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
            error = exc if isinstance(exc, MnnEngineError) else MnnEngineError("internal_error", "the pull failed "
                                                                              "unexpectedly (see the server log)")
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
        name = self.require_model()
        body = self.parse_body()
        if not isinstance(body, Mapping):
            raise invalid("body", "the request body must be a JSON object")
        model = self.model_named_in(body, name)
        inputs = body.get("input")
        if not isinstance(inputs, str) and not (isinstance(inputs, list) and all(isinstance(t, str) for t in inputs)):
            raise invalid("input", "'input' must be a string or a list of strings")
        truncate = body.get("truncate", True)
        if not isinstance(truncate, bool):
            raise invalid("truncate", "'truncate' must be true or false")
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
        name = self.require_model()
        body = self.parse_body()
        self.model_named_in(body, name)
        prompt = body.get("prompt") if isinstance(body, Mapping) else None
        if not isinstance(prompt, str):
            raise invalid("prompt", "'prompt' must be a string")
        result = await self.embed(prompt, normalize=False)
        self.send_json({"embedding": result.vectors[0]})


def routes(ctx: Any) -> list[tuple[str, type, dict[str, Any]]]:
    return [(r"/api/version", VersionHandler, {"ctx": ctx}), (r"/api/tags", TagsHandler, {"ctx": ctx}),
            (r"/api/ps", PsHandler, {"ctx": ctx}), (r"/api/show", ShowHandler, {"ctx": ctx}),
            (r"/api/chat", ChatHandler, {"ctx": ctx}), (r"/api/generate", GenerateHandler, {"ctx": ctx}),
            (r"/api/pull", PullHandler, {"ctx": ctx}), (r"/api/embed", EmbedHandler, {"ctx": ctx}),
            (r"/api/embeddings", LegacyEmbeddingsHandler, {"ctx": ctx})]
