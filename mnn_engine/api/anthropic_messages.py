"""Anthropic's Messages API (``POST /v1/messages``) in the engine's terms.

A request becomes the chat route's own request (``parse_chat_request``), so
its rules (roles, images, tools, structured tool calls, sampling bounds)
are enforced in one place; this module only translates shapes, following
Anthropic's API reference and the ``anthropic`` SDK's types:

- ``system`` (a string or text blocks) becomes the system message;
  ``messages`` with ``text``, ``image`` (a base64 ``source``), ``tool_use``
  and ``tool_result`` blocks become OpenAI-shaped messages (a tool result is
  a ``tool`` message, a ``tool_use`` an earlier tool call); ``thinking``
  blocks an assistant turn sends back are dropped, as Anthropic drops them
  from earlier turns;
- ``tools`` (``name``, ``description``, ``input_schema``) are function tools;
  Anthropic's server tools (web search, code execution, bash, computer use, a
  text editor: a versioned ``type``) cannot run here and are refused by name;
  ``tool_choice`` ``auto`` / ``any`` / ``tool`` / ``none`` map onto
  ``auto`` / ``required`` / a named function / ``none``;
- ``thinking`` ``enabled`` (or ``adaptive``) / ``disabled`` switch the
  model's thinking (the chat templates served here switch it on or off:
  ``budget_tokens`` is checked as Anthropic checks it, not enforced);
- ``output_config.format`` (a JSON schema) goes through structured output;
- ``temperature``, ``top_p`` and ``top_k`` are read where a client sends them
  (the SDK's newest versions no longer do: ``extra_body``);
- the answer's ``content`` blocks (``thinking``, ``text``, ``tool_use``),
  ``stop_reason`` and ``usage`` (``cache_read_input_tokens``: the prompt
  tokens the prompt cache held).

No Tornado here; ``server/anthropic.py`` serves it.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable, Mapping
from datetime import datetime, timezone
from typing import Any

from ..checks import boolean, invalid, is_int, obj, strings
from ..errors import ERROR_CODES, MnnEngineError
from ..runtime.generation import GenerationResult
from .openai_chat import ChatRequest, Delta, MediaPolicy, arguments_object, function_tool, parse_chat_request

#: the ``anthropic-version`` this route follows (the only one Anthropic has published for the Messages API)
ANTHROPIC_VERSION = "2023-06-01"

#: Anthropic's error ``type`` by HTTP status (its API reference's error table); the status itself comes
#: from the one error table (``errors.ERROR_CODES``)
ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
               404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error"}

#: Anthropic's sampling fields -> the chat route's (and llama.cpp's ignore_eos, as the chat route takes it)
_SAMPLING = {"temperature": "temperature", "top_p": "top_p", "top_k": "top_k", "ignore_eos": "ignore_eos"}


def error_type(status: int) -> str:
    """Anthropic's error ``type`` for an HTTP status (``api_error`` for a server-side failure)."""
    if status in ERROR_TYPES:
        return ERROR_TYPES[status]
    return "invalid_request_error" if 400 <= status < 500 else "api_error"


def error_payload(exc: MnnEngineError) -> dict[str, Any]:
    """An error in Anthropic's shape, with this server's stable code beside it."""
    return {"type": "error", "error": {"type": error_type(ERROR_CODES[exc.code].http_status),
                                       "message": exc.message, "code": exc.code}}


def model_info(model: Mapping[str, Any]) -> dict[str, Any]:
    """A served model (as ``/v1/models`` lists it, OpenAI's shape) as Anthropic's ``ModelInfo``."""
    created = datetime.fromtimestamp(model["created"], timezone.utc).isoformat().replace("+00:00", "Z")
    return {"type": "model", "id": model["id"], "display_name": model["id"], "created_at": created,
            "lifecycle": "active", "max_input_tokens": model["context_length"]}


def model_list(models: list[dict[str, Any]]) -> dict[str, Any]:
    """``/v1/models`` as Anthropic's list (one page: every model served)."""
    data = [model_info(m) for m in models]
    return {"data": data, "has_more": False, "first_id": data[0]["id"] if data else None,
            "last_id": data[-1]["id"] if data else None}


def message_id() -> str:
    return "msg_" + secrets.token_hex(12)


def _text_of(blocks: Any, where: str) -> str:
    """The text of a string or a list of ``text`` blocks (a system prompt, a tool result)."""
    if isinstance(blocks, str):
        return blocks
    if not isinstance(blocks, list):
        raise invalid(where, "must be a string or a list of text blocks")
    parts = []
    for index, block in enumerate(blocks):
        if not isinstance(block, Mapping) or block.get("type") != "text" or not isinstance(block.get("text"), str):
            kind = block.get("type") if isinstance(block, Mapping) else type(block).__name__
            raise invalid(where, f"{where}[{index}] must be a text block (got {kind!r})")
        parts.append(block["text"])
    return "\n\n".join(parts)


def _image_part(block: Mapping[str, Any], where: str) -> dict[str, Any]:
    source = block.get("source")
    if not isinstance(source, Mapping):
        raise invalid(f"{where}.source", "is required")
    if source.get("type") != "base64":
        raise invalid(f"{where}.source.type", f"must be \"base64\" (the server fetches nothing from "
                             f"the network; got {source.get('type')!r})")
    media_type, data = source.get("media_type"), source.get("data")
    if not isinstance(media_type, str) or not media_type.startswith("image/") or not isinstance(data, str):
        raise invalid(f"{where}.source", "needs media_type (image/...) and base64 data")
    return {"type": "image_url", "image_url": {"url": f"data:{media_type};base64,{data}"}}


def _tool_result(block: Mapping[str, Any], where: str) -> dict[str, Any]:
    if not isinstance(block.get("tool_use_id"), str):
        raise invalid(f"{where}.tool_use_id", "is required")
    content = block.get("content", "")
    text = _text_of(content, f"{where}.content") if content is not None else ""
    if block.get("is_error"):
        text = f"Error: {text}"
    return {"role": "tool", "tool_call_id": block["tool_use_id"], "content": text}


def _tool_use(block: Mapping[str, Any], where: str) -> dict[str, Any]:
    if not isinstance(block.get("id"), str) or not isinstance(block.get("name"), str):
        raise invalid(where, "needs id and name")
    arguments = block.get("input", {})
    if not isinstance(arguments, Mapping):
        raise invalid(f"{where}.input", "must be an object")
    return {"id": block["id"], "type": "function",
            "function": {"name": block["name"], "arguments": json.dumps(arguments, ensure_ascii=False)}}


def _message(message: Any, index: int) -> list[dict[str, Any]]:
    """One Anthropic message as the chat route's messages (tool results first, as their own messages)."""
    where = f"messages[{index}]"
    if not isinstance(message, Mapping):
        raise invalid(where, "must be an object")
    role = message.get("role")
    if role not in ("user", "assistant"):
        raise invalid(f"{where}.role", "must be \"user\" or \"assistant\"")
    content = message.get("content")
    if isinstance(content, str):
        return [{"role": role, "content": content}]
    if not isinstance(content, list):
        raise invalid(f"{where}.content", "must be a string or a list of content blocks")
    out: list[dict[str, Any]] = []
    parts: list[dict[str, Any]] = []
    calls: list[dict[str, Any]] = []
    for at, block in enumerate(content):
        part = f"{where}.content[{at}]"
        kind = block.get("type") if isinstance(block, Mapping) else None
        if kind == "text" and isinstance(block.get("text"), str):
            parts.append({"type": "text", "text": block["text"]})
        elif kind == "image" and role == "user":
            parts.append(_image_part(block, part))
        elif kind == "tool_result" and role == "user":
            out.append(_tool_result(block, part))
        elif kind == "tool_use" and role == "assistant":
            calls.append(_tool_use(block, part))
        elif kind in ("thinking", "redacted_thinking") and role == "assistant":
            continue  # earlier turns' thinking is not part of the prompt (Anthropic drops it too)
        else:
            raise invalid(part, f"a {role} message cannot hold a {kind!r} block here (text, image, "
                                f"tool_use and tool_result blocks are served)")
    if parts or calls or not out:
        turn: dict[str, Any] = {"role": role, "content": parts if any(p["type"] != "text" for p in parts)
                                else "".join(p["text"] for p in parts)}
        if calls:
            turn["tool_calls"] = calls
        out.append(turn)
    return out


def _tools(tools: Any) -> list[dict[str, Any]]:
    if not isinstance(tools, list):
        raise invalid("tools", "must be a list")
    out = []
    for index, tool in enumerate(tools):
        where = f"tools[{index}]"
        if not isinstance(tool, Mapping):
            raise invalid(where, "must be an object")
        kind = tool.get("type")
        if kind not in (None, "custom"):
            raise invalid(where, f"{kind!r} is one of Anthropic's server tools, which cannot run here "
                                 "(only tools with an input_schema, which the client runs)")
        if not isinstance(tool.get("name"), str) or not isinstance(tool.get("input_schema"), Mapping):
            raise invalid(where, "needs name and input_schema")
        out.append(function_tool(tool["name"], tool["input_schema"], tool.get("description")))
    return out


def _tool_choice(choice: Any) -> Any:
    if not isinstance(choice, Mapping) or choice.get("type") not in ("auto", "any", "tool", "none"):
        raise invalid("tool_choice", "must be {\"type\": \"auto\" | \"any\" | \"tool\" | \"none\"}")
    if choice["type"] == "tool":
        if not isinstance(choice.get("name"), str):
            raise invalid("tool_choice", "of type \"tool\" needs the tool's name")
        return {"type": "function", "function": {"name": choice["name"]}}
    return {"auto": "auto", "any": "required", "none": "none"}[choice["type"]]


#: thinking's types (the SDK's ThinkingConfigParam): every one but "disabled" switches it on
THINKING_TYPES = ("enabled", "adaptive", "between_tools", "disabled")


def _thinking(thinking: Any, max_tokens: int) -> bool:
    if not isinstance(thinking, Mapping) or thinking.get("type") not in THINKING_TYPES:
        raise invalid("thinking", "must be {\"type\": \"enabled\", \"budget_tokens\": N}, "
                                  "{\"type\": \"adaptive\"} or {\"type\": \"disabled\"}")
    if thinking["type"] == "enabled":
        budget = thinking.get("budget_tokens")
        if not is_int(budget) or budget < 1024 or budget >= max_tokens:
            raise invalid("thinking", "thinking.budget_tokens must be an integer of at least 1024 and less than "
                                      "max_tokens")
    return thinking["type"] != "disabled"


def _output_config(output: Any) -> dict[str, Any]:
    """``output_config.format`` (a JSON schema the answer follows) through the structured-output path;
    ``effort`` is accepted (the models served here have no effort levels)."""
    obj(output, "output_config")
    fmt = output.get("format")
    if fmt is None:
        return {}
    if not isinstance(fmt, Mapping) or fmt.get("type") != "json_schema" or not isinstance(fmt.get("schema"), Mapping):
        raise invalid("output_config", "output_config.format must be {\"type\": \"json_schema\", \"schema\": {...}}")
    return {"response_format": {"type": "json_schema", "json_schema": {"name": "output", "schema": fmt["schema"]}}}


def chat_body(body: Any, *, counting: bool = False) -> dict[str, Any]:
    """The chat route's request body for a Messages request (``counting``: count_tokens, no max_tokens)."""
    obj(body, "body")
    max_tokens = body.get("max_tokens")
    if not counting and (not is_int(max_tokens) or max_tokens < 1):
        raise invalid("max_tokens", "is required: a positive integer")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise invalid("messages", "must be a non-empty list")
    out: dict[str, Any] = {"messages": []}
    if body.get("system") is not None:
        out["messages"].append({"role": "system", "content": _text_of(body["system"], "system")})
    for index, message in enumerate(messages):
        out["messages"] += _message(message, index)
    if not counting:
        out["max_tokens"] = max_tokens
    for theirs, ours in _SAMPLING.items():
        if body.get(theirs) is not None:
            out[ours] = body[theirs]
    stops = body.get("stop_sequences")
    if stops is not None and strings(stops, "stop_sequences"):
        out["stop"] = stops
    if body.get("tools"):
        out["tools"] = _tools(body["tools"])
    if body.get("tool_choice") is not None:
        out["tool_choice"] = _tool_choice(body["tool_choice"])
    if body.get("thinking") is not None:
        out["chat_template_kwargs"] = {"enable_thinking": _thinking(body["thinking"], max_tokens or 2**31)}
    output = body.get("output_config")
    if output is not None:
        out.update(_output_config(output))
    obj(body.get("metadata"), "metadata", nullable=True)
    out["stream"] = boolean(body.get("stream", False), "stream")
    return out


def messages_request(body: Any, policy: MediaPolicy, *, counting: bool = False) -> ChatRequest:
    """A Messages request as the chat route's (its images decoded: run off the IOLoop)."""
    return parse_chat_request(chat_body(body, counting=counting), policy)


def stop_reason(result: GenerationResult, tool_calls: bool, stops: list[str] | None,
                generated: Callable[[], str]) -> tuple[str, str | None]:
    """Anthropic's ``stop_reason`` and ``stop_sequence``. ``generated()`` is the text of every token
    generated, the stop string included (``result.text`` ends before it); asked only when the request
    had stop strings."""
    if result.finish_reason == "length":
        return "max_tokens", None
    if tool_calls:
        return "tool_use", None
    if stops:
        text = generated()
        rest = text[len(result.text):] if text.startswith(result.text) else ""
        for stop in stops:
            if rest.startswith(stop):
                return "stop_sequence", stop
    return "end_turn", None


def usage(result: GenerationResult) -> dict[str, Any]:
    """Anthropic's usage: ``input_tokens`` are the tokens prefilled (those the prompt cache held are
    ``cache_read_input_tokens``, as Anthropic counts them apart)."""
    return {"input_tokens": result.prompt_tokens - result.cached_tokens, "output_tokens": result.completion_tokens,
            "cache_creation_input_tokens": 0, "cache_read_input_tokens": result.cached_tokens}


def tool_use_block(delta: Delta) -> dict[str, Any]:
    """A parsed tool call as a ``tool_use`` block (arguments cut off by the token limit: those that parse)."""
    call = delta.tool_call
    return {"type": "tool_use", "id": "toolu_" + call["id"].removeprefix("call_"),
            "name": call["function"]["name"], "input": arguments_object(call["function"]["arguments"])}


def content_blocks(deltas: list[Delta]) -> list[dict[str, Any]]:
    """A whole answer's content blocks, in the order the model wrote them."""
    blocks: list[dict[str, Any]] = []
    for delta in deltas:
        if delta.kind == "tool_call":
            blocks.append(tool_use_block(delta))
            continue
        kind = "thinking" if delta.kind == "reasoning" else "text"  # the block's text is under its type's name
        if blocks and blocks[-1]["type"] == kind:
            blocks[-1][kind] += delta.text
        else:
            blocks.append({"type": kind, kind: delta.text, **({"signature": ""} if kind == "thinking" else {})})
    return blocks


def message(model: str, msg_id: str, blocks: list[dict[str, Any]], reason: str | None, sequence: str | None,
            usage_: dict[str, Any]) -> dict[str, Any]:
    """The ``message`` object (a whole answer, or the stream's ``message_start`` with no content yet)."""
    return {"id": msg_id, "type": "message", "role": "assistant", "model": model, "content": blocks,
            "stop_reason": reason, "stop_sequence": sequence, "usage": usage_}
