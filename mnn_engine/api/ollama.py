"""Ollama's API (docs/api.md) in the engine's terms: options, messages
(images, earlier tool calls), formats, the done frame's figures. No Tornado,
no Engine; ``server/ollama.py`` serves it."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any

from ..checks import boolean, invalid, obj
from ..options import keep_alive_seconds
from ..runtime.generation import GenerationResult
from .openai_chat import ChatRequest, MediaPolicy, arguments_object, finish_reason, parse_chat_request

#: the Ollama API version these routes follow
OLLAMA_VERSION = "0.9.0"


#: Ollama option -> our sampling option
OPTIONS = {"temperature": "temperature", "top_p": "top_p", "top_k": "top_k", "min_p": "min_p", "seed": "seed",
           "stop": "stop", "repeat_penalty": "repetition_penalty", "presence_penalty": "presence_penalty",
           "frequency_penalty": "frequency_penalty", "num_predict": "max_tokens"}


def now() -> str:
    return datetime.now(timezone.utc).isoformat().replace("+00:00", "Z")


def tagged(name: str) -> str:
    return name if ":" in name else f"{name}:latest"


def keep_alive_field(body: Mapping[str, Any]) -> Any:
    """A request's ``keep_alive`` (``keep_alive_seconds``); ``...`` when the
    request has none (the server's default applies)."""
    if "keep_alive" not in body or body["keep_alive"] is None:
        return ...
    return keep_alive_seconds(body["keep_alive"])


def sampling_options(body: Mapping[str, Any]) -> dict[str, Any]:
    options = obj(body.get("options") or {}, "options")
    sampling = {ours: options[theirs] for theirs, ours in OPTIONS.items() if options.get(theirs) is not None}
    if sampling.get("max_tokens") in (-1, -2):  # Ollama: -1 no limit, -2 fill the context
        sampling["max_tokens"] = -1
    fmt = body.get("format")
    if fmt == "json":
        sampling["response_format"] = {"type": "json_object"}
    elif isinstance(fmt, Mapping):
        sampling["response_format"] = {"type": "json_schema", "json_schema": {"name": "format", "schema": fmt}}
    elif fmt not in (None, ""):
        raise invalid("format", "must be \"json\" or a JSON schema")
    return sampling


def _image_part(data: Any) -> dict[str, Any]:
    if not isinstance(data, str):
        raise invalid("images", "must be base64 strings")
    try:
        head = base64.b64decode(data[:64] + "=" * (-len(data[:64]) % 4), validate=False)
    except ValueError as exc:
        raise invalid("images", "an image is not base64") from exc
    mime = "image/png" if head.startswith(b"\x89PNG") else "image/jpeg" if head.startswith(b"\xff\xd8") else \
        "image/webp" if head[8:12] == b"WEBP" else "image/png"
    return {"type": "image_url", "image_url": {"url": f"data:{mime};base64,{data}"}}


def openai_messages(messages: Any) -> Any:
    """Ollama's messages in OpenAI's shape (images as data URLs, tool-call
    arguments as JSON text), for the chat route's own parser."""
    if not isinstance(messages, list):
        return messages  # the parser says what is wrong
    out = []
    for index, message in enumerate(messages):
        if not isinstance(message, Mapping):
            out.append(message)
            continue
        converted = dict(message)
        images = message.get("images")
        if images is not None and not isinstance(images, list):
            raise invalid("images", "must be a list of base64 strings")
        if images:
            converted["content"] = [{"type": "text", "text": message.get("content") or ""},
                                    *(_image_part(i) for i in images)]
            converted.pop("images")
        calls = message.get("tool_calls")
        if calls is not None and not isinstance(calls, list):
            raise invalid("tool_calls", "must be a list")
        if calls:
            converted["tool_calls"] = [_tool_call(call, f"messages[{index}].tool_calls[{i}]")
                                       for i, call in enumerate(calls)]
        out.append(converted)
    return out


def _tool_call(call: Any, where: str) -> dict[str, Any]:
    """An earlier tool call of Ollama's shape, ``{"function": {"name", "arguments"}}``, in OpenAI's."""
    function = call.get("function") if isinstance(call, Mapping) else None
    if not isinstance(function, Mapping) or not isinstance(function.get("name"), str):
        raise invalid("tool_calls", f"{where} must be {{\"function\": {{\"name\": ..., \"arguments\": {{...}}}}}}")
    return {"type": "function", "function": {"name": function["name"],
                                             "arguments": json.dumps(function.get("arguments", {}))}}


def durations(result: GenerationResult, started: float) -> dict[str, Any]:
    return {"done": True, "done_reason": finish_reason(result),
            "total_duration": int((time.perf_counter() - started) * 1e9), "load_duration": 0,
            "prompt_eval_count": result.prompt_tokens, "prompt_eval_duration": int(result.prefill_ms * 1e6),
            "eval_count": result.completion_tokens, "eval_duration": int(result.decode_ms * 1e6)}


def split_deltas(deltas: list[Any]) -> tuple[str, str, list[dict[str, Any]] | None]:
    """Content, thinking and tool calls in Ollama's shape (api/types.go ToolCall:
    an ``id``, ``function.index``, the arguments as an object; a call cut off
    by the token limit has the arguments that parse, else none)."""
    content = "".join(d.text for d in deltas if d.kind == "content")
    thinking = "".join(d.text for d in deltas if d.kind == "reasoning")
    calls = [{"id": d.tool_call["id"],
              "function": {"index": d.tool_call["index"], "name": d.tool_call["function"]["name"],
                           "arguments": arguments_object(d.tool_call["function"]["arguments"])}}
             for d in deltas if d.kind == "tool_call"]
    return content, thinking, calls or None


#: Ollama's think levels (api/types.go ThinkValue)
THINK_LEVELS = ("low", "medium", "high")


def chat_request(body: Mapping[str, Any], messages: Any, policy: MediaPolicy) -> ChatRequest:
    openai_body: dict[str, Any] = {"messages": messages}
    if body.get("tools"):
        openai_body["tools"] = body["tools"]
    think = body.get("think")
    if isinstance(think, str) and think in THINK_LEVELS:
        # Ollama's levels set a reasoning budget for models that have one (gpt-oss); the chat templates
        # served here only switch thinking on or off, so any level is on (the README says so)
        think = True
    if think is not None and not isinstance(think, bool):
        raise invalid("think", f"must be true, false or one of {', '.join(THINK_LEVELS)}")
    if isinstance(think, bool):
        openai_body["chat_template_kwargs"] = {"enable_thinking": think}
    request = parse_chat_request(openai_body, policy)
    try:
        request.sampling.update(sampling_options(body))
    except BaseException:
        request.cleanup()
        raise
    return request


def stream_flag(body: Mapping[str, Any]) -> bool:
    return boolean(body.get("stream", True), "stream")  # Ollama streams unless told not to
