"""OpenAI's Responses API (``POST /v1/responses``) in the engine's terms.

A request becomes the chat route's own request (``parse_chat_request``), so
its rules are enforced in one place; this module translates shapes, after
OpenAI's OpenAPI document (``Response``, ``ResponseStreamEvent``) and the
``openai`` SDK:

- ``input`` (a string, or items: messages with ``input_text`` /
  ``input_image`` / ``output_text`` parts, ``function_call`` and
  ``function_call_output`` items, earlier ``reasoning`` items, which are
  dropped from the prompt as OpenAI drops them) and ``instructions`` become
  chat messages; ``previous_response_id``'s conversation comes first
  (``api/response_store``);
- ``tools`` of type ``function`` are chat tools; OpenAI's built-in tools
  (web and file search, code interpreter, computer use, MCP, image
  generation, shells) cannot run here and are refused by name;
- ``text.format`` goes through structured output, ``reasoning.effort`` maps
  as the chat route's ``reasoning_effort``, ``max_output_tokens`` is
  ``max_tokens``;
- the answer's ``output`` items (``reasoning`` with the model's thinking,
  ``message`` with ``output_text``, ``function_call``), ``status`` and
  ``usage`` (``input_tokens_details.cached_tokens``: the prompt cache's).

No Tornado here; ``server/responses.py`` serves it.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..checks import integer, invalid, number, obj
from ..runtime.generation import GenerationResult, TokenLogprob
from ..runtime.sampling import MAX_TOP_LOGPROBS
from .openai_chat import (
    ChatRequest,
    MediaPolicy,
    boolean_field,
    function_tool,
    logprobs_object,
    parse_chat_request,
)

#: OpenAI's built-in tools (its ``Tool`` schema's types other than ``function``): none can run here
BUILT_IN_TOOLS = ("web_search", "web_search_preview", "web_search_2025_08_26", "web_search_preview_2025_03_11",
                  "file_search", "code_interpreter", "computer_use_preview", "computer_use", "mcp",
                  "image_generation", "local_shell", "shell", "apply_patch", "custom")
#: ``include`` values accepted. ``message.output_text.logprobs`` adds the answer's log-probabilities (with
#: ``top_logprobs`` alternatives); the others add nothing that is not already there: the built-in tools' outputs
#: and encrypted reasoning do not exist here, and stored input items keep their image URLs as given.
LOGPROBS = "message.output_text.logprobs"
INCLUDE = (LOGPROBS, "reasoning.encrypted_content", "message.input_image.image_url", "web_search_call.action.sources",
           "code_interpreter_call.outputs", "computer_call_output.output.image_url", "file_search_call.results",
           "web_search_call.results")


def new_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(16)}"


@dataclass
class ResponsesRequest:
    """A Responses request: the chat route's request, and what the answer echoes."""

    chat: ChatRequest
    #: this request's own input, as items (what ``input_items`` lists)
    input_items: list[dict[str, Any]]
    #: the conversation before this request's input (``previous_response_id``'s), as items
    history: list[dict[str, Any]] = field(default_factory=list)
    echo: dict[str, Any] = field(default_factory=dict)  # instructions, tools, tool_choice, ... as the answer has them
    stream: bool = False

    @property
    def store(self) -> bool:
        """Whether the answer is kept (``store``, as the answer echoes it)."""
        return bool(self.echo.get("store", True))


def input_items(value: Any) -> list[dict[str, Any]]:
    """``input`` as a list of items, each with an ``id`` (a string is one user message)."""
    if isinstance(value, str):
        value = [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": value}]}]
    if not isinstance(value, list) or not value:
        raise invalid("input", "must be a string or a non-empty list of items")
    items = []
    for index, item in enumerate(value):
        if not isinstance(item, Mapping):
            raise invalid(f"input[{index}]", "each input item must be an object")
        item = dict(item)
        if "type" not in item and "role" in item:
            item["type"] = "message"
        if not isinstance(item.get("type"), str):
            raise invalid(f"input[{index}]", "each input item needs a type (or a role, for a message)")
        if item["type"] == "message" and isinstance(item.get("content"), str):
            kind = "output_text" if item.get("role") == "assistant" else "input_text"
            item["content"] = [{"type": kind, "text": item["content"]}]
        item.setdefault("id", new_id({"function_call_output": "fco", "function_call": "fc"}.get(item["type"], "msg")))
        items.append(item)
    return items


def _part(part: Any, where: str, role: str) -> dict[str, Any]:
    kind = part.get("type") if isinstance(part, Mapping) else None
    if kind in ("input_text", "output_text", "text", "refusal") and isinstance(part.get("text", part.get("refusal")),
                                                                                str):
        return {"type": "text", "text": part.get("text", part.get("refusal"))}
    if kind == "input_image" and role != "assistant":
        url = part.get("image_url")
        if not isinstance(url, str):
            raise invalid(where, "an input_image needs image_url (a data: URL; file_id is not served)")
        return {"type": "image_url", "image_url": {"url": url}}
    raise invalid(where, f"a {role} message cannot hold a {kind!r} part (input_text, input_image and "
                         "output_text parts are served)")


def chat_messages(items: list[dict[str, Any]], instructions: str | None) -> list[dict[str, Any]]:
    """Items as the chat route's messages (consecutive function calls become one assistant turn)."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": instructions}] if instructions else []
    for index, item in enumerate(items):
        where = f"input[{index}]"
        kind = item.get("type")
        if kind == "message":
            role = item.get("role")
            if role not in ("user", "assistant", "system", "developer"):
                raise invalid(f"{where}.role", "role must be user, assistant, system or developer")
            content = item.get("content")
            if not isinstance(content, list):
                raise invalid(f"{where}.content", "content must be a string or a list of parts")
            parts = [_part(p, f"{where}.content[{i}]", role) for i, p in enumerate(content)]
            text_only = all(p["type"] == "text" for p in parts)
            messages.append({"role": role, "content": "".join(p["text"] for p in parts) if text_only else parts})
        elif kind == "function_call":
            if not all(isinstance(item.get(k), str) for k in ("call_id", "name", "arguments")):
                raise invalid(where, "a function_call needs call_id, name and arguments (strings)")
            call = {"id": item["call_id"], "type": "function",
                    "function": {"name": item["name"], "arguments": item["arguments"]}}
            last = messages[-1] if messages else None
            if last is not None and last["role"] == "assistant" and isinstance(last["content"], str):
                last.setdefault("tool_calls", []).append(call)
            else:
                messages.append({"role": "assistant", "content": "", "tool_calls": [call]})
        elif kind == "function_call_output":
            output = item.get("output")
            if isinstance(output, list):
                output = "".join(p.get("text", "") for p in output if isinstance(p, Mapping))
            if not isinstance(item.get("call_id"), str) or not isinstance(output, str):
                raise invalid(where, "a function_call_output needs call_id and output")
            messages.append({"role": "tool", "tool_call_id": item["call_id"], "content": output})
        elif kind == "reasoning":
            continue  # earlier reasoning is not part of the prompt (OpenAI drops it too)
        else:
            raise invalid(where, f"items of type {kind!r} are not served (message, function_call, "
                                 "function_call_output and reasoning are)")
    return messages


def _tools(tools: Any) -> list[dict[str, Any]]:
    if not isinstance(tools, list):
        raise invalid("tools", "must be a list")
    out = []
    for index, tool in enumerate(tools):
        where = f"tools[{index}]"
        kind = tool.get("type") if isinstance(tool, Mapping) else None
        if kind in BUILT_IN_TOOLS:
            raise invalid(where, f"the built-in tool {kind!r} cannot run on this server (function tools, "
                                 "which the client runs, are served)")
        if kind != "function" or not isinstance(tool.get("name"), str):
            raise invalid(where, "must be {\"type\": \"function\", \"name\": ..., \"parameters\": {...}}")
        out.append(function_tool(tool["name"], tool.get("parameters") or {"type": "object", "properties": {}},
                                 tool.get("description")))
    return out


def _tool_choice(choice: Any) -> Any:
    if choice in ("auto", "none", "required"):
        return choice
    if isinstance(choice, Mapping) and choice.get("type") == "function" and isinstance(choice.get("name"), str):
        return {"type": "function", "function": {"name": choice["name"]}}
    raise invalid("tool_choice",
                  "'tool_choice' must be auto, none, required or {\"type\": \"function\", \"name\": ...}")


def _format(text: Any) -> dict[str, Any] | None:
    obj(text, "text")
    fmt = text.get("format")
    if fmt is None:
        return None
    if not isinstance(fmt, Mapping) or fmt.get("type") not in ("text", "json_object", "json_schema"):
        raise invalid("text.format", "must be {\"type\": \"text\" | \"json_object\" | \"json_schema\"}")
    if fmt["type"] == "json_schema":
        if not isinstance(fmt.get("schema"), Mapping):
            raise invalid("text.format", "a json_schema format needs its schema")
        return {"type": "json_schema", "json_schema": {"name": fmt.get("name", "output"), "schema": fmt["schema"],
                                                       "strict": fmt.get("strict")}}
    return {"type": fmt["type"]}


#: OpenAI's bounds of the sampling fields a response echoes (its Response schema)
_BOUNDS = {"temperature": (0.0, 2.0), "top_p": (0.0, 1.0)}


def _options(body: Mapping[str, Any], out: dict[str, Any]) -> None:
    """Sampling, limits, tools and formats, as the chat route's fields."""
    for name, (low, high) in _BOUNDS.items():
        number(body.get(name), name, low=low, high=high, nullable=True)
    if body.get("max_output_tokens") is not None:
        out["max_tokens"] = body["max_output_tokens"]
    for name in ("temperature", "top_p", "seed", "top_k", "stop", "ignore_eos"):  # the last three: extensions
        if body.get(name) is not None:
            out[name] = body[name]
    if body.get("tools"):
        out["tools"] = _tools(body["tools"])
    if body.get("tool_choice") is not None:
        out["tool_choice"] = _tool_choice(body["tool_choice"])
    if body.get("text") is not None:
        fmt = _format(body["text"])
        if fmt is not None:
            out["response_format"] = fmt
    reasoning = body.get("reasoning")
    if reasoning is not None and obj(reasoning, "reasoning").get("effort") is not None:
        effort = reasoning["effort"]
        out["reasoning_effort"] = "high" if effort == "xhigh" else effort
    include = body.get("include")
    if include is not None and (not isinstance(include, list) or any(i not in INCLUDE for i in include)):
        raise invalid("include", f"takes a list of: {', '.join(INCLUDE)}")
    # checked here, whatever else was asked: false or 0 asks for nothing, but only 0 is a count
    top = integer(body.get("top_logprobs"), "top_logprobs", low=0, high=MAX_TOP_LOGPROBS, nullable=True)
    if (include and LOGPROBS in include) or top:  # alternatives asked for are log-probabilities asked for
        out["logprobs"] = True
        if top is not None:
            out["top_logprobs"] = top  # its bounds are the chat route's (0..20)
    metadata = body.get("metadata")
    if metadata is not None and (not isinstance(metadata, Mapping) or len(metadata) > 16 or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in metadata.items())):
        raise invalid("metadata", "must be at most 16 string keys and values")


def responses_request(body: Any, history: list[dict[str, Any]], policy: MediaPolicy) -> ResponsesRequest:
    """A Responses request as the chat route's (its images decoded: run off the IOLoop); ``history`` is
    ``previous_response_id``'s conversation, as items."""
    obj(body, "body")
    items = input_items(body.get("input"))
    instructions = body.get("instructions")
    if instructions is not None and not isinstance(instructions, str):
        raise invalid("instructions", "must be text")
    chat_body: dict[str, Any] = {"messages": chat_messages([*history, *items], instructions)}
    _options(body, chat_body)
    if chat_body.get("tool_choice") in ("auto", "none") and not chat_body.get("tools"):
        del chat_body["tool_choice"]  # the SDKs send one with no tools
    tools = [{"type": "function", "name": t["function"]["name"], "parameters": t["function"]["parameters"],
              "strict": body["tools"][i].get("strict"), **({"description": t["function"]["description"]}
                                                           if "description" in t["function"] else {})}
             for i, t in enumerate(chat_body.get("tools") or [])]  # as the answer echoes them
    echo = {"instructions": instructions, "tools": tools,
            "tool_choice": body.get("tool_choice") or "auto",
            "parallel_tool_calls": boolean_field(body, "parallel_tool_calls", True),
            "temperature": body.get("temperature", 1.0), "top_p": body.get("top_p", 1.0),
            "max_output_tokens": body.get("max_output_tokens"), "top_logprobs": body.get("top_logprobs"),
            "metadata": body.get("metadata") or {},
            "previous_response_id": body.get("previous_response_id"),
            "text": {"format": (body.get("text") or {}).get("format") or {"type": "text"}},
            "reasoning": {"effort": (body.get("reasoning") or {}).get("effort"), "summary": None},
            "store": boolean_field(body, "store", True)}
    if isinstance(body.get("user"), str):
        echo["user"] = body["user"]
    return ResponsesRequest(parse_chat_request(chat_body, policy), items, list(history), echo,
                            stream=boolean_field(body, "stream", False))


def usage(result: GenerationResult) -> dict[str, Any]:
    """The Responses API's usage (reasoning tokens are not counted apart: 0, inside ``output_tokens``)."""
    return {"input_tokens": result.prompt_tokens, "input_tokens_details": {"cached_tokens": result.cached_tokens,
                                                                      "cache_write_tokens": 0},
            "output_tokens": result.completion_tokens, "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": result.prompt_tokens + result.completion_tokens}


def message_item(item_id: str, text: str, status: str = "completed",
                 logprobs: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {"id": item_id, "type": "message", "role": "assistant", "status": status,
            "content": [output_text(text, logprobs)] if status == "completed" else []}


def output_text(text: str, logprobs: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": logprobs or []}


def message_logprobs(texts: list[str], logprobs: tuple[TokenLogprob, ...] | None,
                     token_bytes: Any) -> list[list[dict[str, Any]]]:
    """Each message text's tokens with their log-probabilities (OpenAI's ``LogProb``), in order.

    The generation's tokens cover reasoning and tool-call markup too; a message's own are those whose bytes
    overlap its text where it stands in the generated bytes. Texts are found from the end, each before the
    next one (a message follows the reasoning it could repeat). Without log-probabilities, all are empty.
    """
    entries = logprobs_object(logprobs, token_bytes)
    if entries is None:
        return [[] for _ in texts]
    entries = entries["content"]
    ends, offset = [], 0
    for entry in entries:
        offset += len(entry["bytes"])
        ends.append(offset)
    generated = b"".join(bytes(e["bytes"]) for e in entries)
    out: list[list[dict[str, Any]]] = []
    limit = len(generated)
    for text in reversed(texts):
        raw = text.encode()
        start = generated.rfind(raw, 0, limit) if raw else -1
        if start < 0:
            out.append([])
            continue
        limit, stop = start, start + len(raw)
        out.append([e for e, end in zip(entries, ends, strict=True) if end > start and end - len(e["bytes"]) < stop])
    return out[::-1]


def reasoning_item(item_id: str, text: str) -> dict[str, Any]:
    return {"id": item_id, "type": "reasoning", "summary": [],
            "content": [{"type": "reasoning_text", "text": text}] if text else []}


def function_call_item(item_id: str, call: Mapping[str, Any], status: str = "completed") -> dict[str, Any]:
    return {"id": item_id, "type": "function_call", "call_id": call["id"], "name": call["function"]["name"],
            "arguments": call["function"]["arguments"], "status": status}


def response(response_id: str, model: str, request: ResponsesRequest, created: float, output: list[dict[str, Any]],
             result: GenerationResult | None) -> dict[str, Any]:
    """The response object: ``in_progress`` without a result, else ``completed`` or ``incomplete``."""
    status = "in_progress" if result is None else "incomplete" if result.finish_reason == "length" else "completed"
    return {"id": response_id, "object": "response", "created_at": int(created), "status": status,
            "completed_at": None if result is None else int(time.time()), "error": None,
            "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete" else None,
            "model": model, "output": output, **request.echo, "truncation": "disabled", "background": False,
            "service_tier": "default", **({} if result is None else {"usage": usage(result)})}
