"""Translation between OpenAI's chat completions API and the engine.

In: a request body becomes chat messages for the model's template, sampling
options, tools and images (``parse_chat_request``). Out: the model's text is
split into ``reasoning_content`` (``<think>...</think>``), ``content`` and
``tool_calls`` (Qwen's ``<tool_call>{json}</tool_call>``) as it streams
(``OutputParser``), and shaped into OpenAI's response and chunk objects.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import json
import math
import os
import re
import secrets
import tempfile
import time
import urllib.parse
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from ..checks import boolean, choice, integer, invalid, obj
from ..runtime import media
from ..runtime.generation import GenerationResult, TokenLogprob
from ..runtime.image_decode import write_decoded_image
from ..runtime.media_header import MediaRefused, read_wav_header
from ..runtime.memory import TRIM_AFTER_BYTES, trim_allocator
from ..runtime.prompt import ChatMessages, chat_messages
from ..scratch import scratch_dir

ROLES = {"system", "developer", "user", "assistant", "tool"}
THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
TOOL_OPEN, TOOL_CLOSE = "<tool_call>", "</tool_call>"
DEFAULT_MAX_IMAGE_BYTES = 10 * 1024 * 1024
MAX_IMAGES = 8
SAMPLING_FIELDS = ("temperature", "top_p", "top_k", "min_p", "presence_penalty", "frequency_penalty",
                    "repetition_penalty", "seed", "logit_bias", "speculative", "draft_tokens")



@dataclass
class ChatRequest:
    """A validated chat completion request, ready for ``Engine.submit``."""

    messages: ChatMessages
    sampling: dict[str, Any]
    stream: bool = False
    include_usage: bool = False
    tools: list[dict[str, Any]] | None = None
    parse_tools: bool = False
    tool_choice: Any = None  # "required" or a named function: enforced by a grammar
    enable_thinking: bool | None = None
    #: the decoded images and sounds, private files until ``cleanup``
    media_files: list[Path] = field(default_factory=list)
    media_dir: str | None = None

    def cleanup(self) -> None:
        """Remove the decoded images' and sounds' private directory (and give a large image's buffers, which
        MNN has freed by now, back to the system)."""
        big = False
        for path in self.media_files:
            media.unregister(path, "audio" if path.suffix == ".wav" else "img")  # _private_file's suffixes
            with contextlib.suppress(OSError):
                big = big or path.stat().st_size >= TRIM_AFTER_BYTES
        self.media_files = []
        if self.media_dir:
            for path in Path(self.media_dir).glob("*"):
                path.unlink(missing_ok=True)
            os.rmdir(self.media_dir)
            self.media_dir = None
        if big:
            trim_allocator()


@dataclass(frozen=True)
class MediaPolicy:
    """What image and sound inputs a server accepts (sounds: the same size limit)."""

    model_is_visual: bool = False
    model_is_audio: bool = False
    allow_file_urls: bool = False
    max_image_bytes: int = DEFAULT_MAX_IMAGE_BYTES


# ---------------------------------------------------------------- request
def parse_chat_request(body: Any, media_policy: MediaPolicy | None = None) -> ChatRequest:
    """Validate an OpenAI chat completion request body (unknown fields are ignored)."""
    policy = media_policy or MediaPolicy()
    obj(body, "body")
    request = ChatRequest(messages=ChatMessages(), sampling={})
    try:
        _parse_options(body, request)
        request.messages = _parse_messages(body.get("messages"), policy, request)
    except BaseException:
        request.cleanup()
        raise
    return request


def boolean_field(body: Mapping[str, Any], name: str, default: bool = False) -> bool:
    """``body[name]`` as a boolean (``default`` when absent or null); a 400 for anything else."""
    value = body.get(name, default)
    if value is None:
        return default
    return boolean(value, name)


def _parse_options(body: Mapping[str, Any], request: ChatRequest) -> None:
    n = body.get("n", 1)
    if n not in (1, None):
        raise invalid("n", "only 1 is supported")
    max_tokens = None
    for name in ("max_completion_tokens", "max_tokens", "n_predict"):
        if body.get(name) is not None:
            max_tokens = body[name]
            break
    if max_tokens is not None:
        request.sampling["max_tokens"] = integer(max_tokens, "max_tokens", why="-1: no limit")
    for name in SAMPLING_FIELDS:
        if body.get(name) is not None:
            request.sampling[name] = body[name]
    if body.get("stop") is not None:
        request.sampling["stop"] = body["stop"]
    if body.get("ignore_eos") is not None:  # llama.cpp's extension: generate the full max_tokens
        request.sampling["ignore_eos"] = boolean_field(body, "ignore_eos")
    if body.get("cache_prompt") is not None:  # llama.cpp's name: reuse the KV cache (on by default)
        request.sampling["cache_prompt"] = boolean_field(body, "cache_prompt")
    if body.get("context_overflow") is not None:  # "truncate": drop the oldest messages to fit
        request.sampling["context_overflow"] = body["context_overflow"]
    request.stream = boolean_field(body, "stream")
    options = obj(body.get("stream_options"), "stream_options", nullable=True)
    if options is not None:
        request.include_usage = boolean_field(options, "include_usage")
    if boolean_field(body, "logprobs"):
        request.sampling["logprobs"] = True
        if body.get("top_logprobs") is not None:
            request.sampling["top_logprobs"] = body["top_logprobs"]
    elif body.get("top_logprobs") not in (None, 0):
        raise invalid("top_logprobs", "needs 'logprobs': true")
    _parse_thinking(body, request)
    _parse_tools(body, request)
    fmt = body.get("response_format")
    if fmt is not None:
        if not isinstance(fmt, Mapping) or fmt.get("type") not in ("text", "json_object", "json_schema"):
            raise invalid("response_format", "must be {\"type\": \"text\" | \"json_object\" | "
                                         "\"json_schema\"}")
        if fmt["type"] != "text":
            request.sampling["response_format"] = fmt  # the schema is checked by mnn_engine.runtime.structured


def _parse_thinking(body: Mapping[str, Any], request: ChatRequest) -> None:
    kwargs = body.get("chat_template_kwargs")
    if kwargs is not None:
        obj(kwargs, "chat_template_kwargs")
        if "enable_thinking" in kwargs:
            request.enable_thinking = boolean(kwargs["enable_thinking"], "chat_template_kwargs.enable_thinking")
    effort = body.get("reasoning_effort")
    if effort is not None:
        choice(effort, "reasoning_effort", ("none", "minimal", "low", "medium", "high"))
        if effort == "none":
            request.enable_thinking = False
        elif request.enable_thinking is None:
            request.enable_thinking = True


def arguments_object(text: str) -> dict[str, Any]:
    """A tool call's arguments (JSON text) as the object the other dialects send: ``{}`` for arguments
    the token limit cut off, or that are not an object."""
    try:
        value = json.loads(text or "{}")
    except (ValueError, RecursionError):
        return {}
    return value if isinstance(value, dict) else {}


def function_tool(name: str, parameters: Any, description: Any = None) -> dict[str, Any]:
    """A function tool in this route's (OpenAI's) shape, as the other dialects' tools become."""
    function = {"name": name, "parameters": parameters}
    if isinstance(description, str):
        function["description"] = description
    return {"type": "function", "function": function}


def _parse_tools(body: Mapping[str, Any], request: ChatRequest) -> None:
    tools = body.get("tools")
    choice = body.get("tool_choice", "auto")
    if tools is None:
        if choice not in ("auto", "none", None):
            raise invalid("tool_choice", "needs 'tools'")
        return
    if not isinstance(tools, list) or not all(isinstance(t, Mapping) for t in tools):
        raise invalid("tools", "must be a list of objects")
    for i, tool in enumerate(tools):
        function = tool.get("function")
        if tool.get("type", "function") != "function" or not isinstance(function, Mapping):
            raise invalid(f"tools[{i}]", "each tool must be {\"type\": \"function\", \"function\": {...}}")
        if not isinstance(function.get("name"), str) or not function["name"]:
            raise invalid(f"tools[{i}].function.name", "a function needs a name")
    names = {t["function"]["name"] for t in tools}
    if choice in (None, "auto"):
        pass
    elif choice == "required":
        request.tool_choice = choice
    elif choice == "none":
        return  # the model is not told about the tools
    elif isinstance(choice, Mapping) and isinstance(choice.get("function"), Mapping):
        name = choice["function"].get("name")
        if name not in names:
            raise invalid("tool_choice", f"names {name!r}, which is not in 'tools'")
        tools = [t for t in tools if t["function"]["name"] == name]
        request.tool_choice = choice
    else:
        raise invalid("tool_choice", "must be auto, none, required or {\"type\": \"function\", ...}")
    request.tools = [_neutralized(dict(t)) for t in tools]
    request.parse_tools = True


def _parse_messages(messages: Any, policy: MediaPolicy, request: ChatRequest) -> ChatMessages:
    """OpenAI's rules for messages (roles, content parts, images, earlier tool
    calls), then the model's own, once (``chat_messages``): the engine takes
    the result as it is."""
    if not isinstance(messages, list) or not messages:
        raise invalid("messages", "must be a non-empty list")
    out = []
    for where, message in _objects(messages, "messages"):
        role = message.get("role")
        if role not in ROLES:
            raise invalid(f"{where}.role", f"must be one of {', '.join(sorted(ROLES))}")
        if message.get("content") is None and not (role == "assistant" and message.get("tool_calls")):
            raise invalid(f"{where}.content", f"is required for a {role} message")
        content = _content_text(message.get("content"), where, policy, request)
        if role == "assistant" and message.get("tool_calls"):
            content += media.neutralize(_tool_calls_text(message["tool_calls"], where))
        # an assistant's earlier reasoning_content is not sent back to the model
        out.append({"role": "system" if role == "developer" else role, "content": content})
    return chat_messages(out)


def _neutralized(value: Any) -> Any:
    """``media.neutralize`` on every string of a JSON value (tools go into the template)."""
    if isinstance(value, str):
        return media.neutralize(value)
    if isinstance(value, Mapping):
        return {media.neutralize(str(k)): _neutralized(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_neutralized(v) for v in value]
    return value


def _objects(items: list[Any], name: str) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """``(name[i], item)`` for each item, which must be a JSON object."""
    for i, item in enumerate(items):
        where = f"{name}[{i}]"
        if not isinstance(item, Mapping):
            raise invalid(where, "must be an object")
        yield where, item


def _content_text(content: Any, where: str, policy: MediaPolicy, request: ChatRequest) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return media.neutralize(content)
    if not isinstance(content, list):
        raise invalid(f"{where}.content", "must be a string or a list of parts")
    texts = []
    for here, part in _objects(content, f"{where}.content"):
        kind = part.get("type")
        if kind == "text":
            if not isinstance(part.get("text"), str):
                raise invalid(f"{here}.text", "must be a string")
            texts.append(media.neutralize(part["text"]))
        elif kind == "image_url":
            texts.append(media.tag("img", _image_file(part.get('image_url'), here, policy, request)))
        elif kind == "input_audio":
            texts.append(media.tag("audio", _audio_file(part.get("input_audio"), here, policy, request)))
        else:
            raise invalid(here, f"unsupported content part type {kind!r} (text, image_url, input_audio)")
    return "".join(texts)


def _image_file(spec: Any, where: str, policy: MediaPolicy, request: ChatRequest) -> str:
    if not policy.model_is_visual:
        raise invalid(where, "this model is text-only: it does not accept images")
    url = spec.get("url") if isinstance(spec, Mapping) else spec
    if not isinstance(url, str) or not url:
        raise invalid(f"{where}.image_url.url", "must be a string")
    if len(request.media_files) >= MAX_IMAGES:
        raise invalid(where, f"at most {MAX_IMAGES} images and sounds per request")
    if url.startswith("data:"):
        header, _, payload = url.partition(",")
        if not header.endswith(";base64") or not header[5:].startswith("image/"):
            raise invalid(where, "image data URLs must look like data:image/<type>;base64,...")
        if len(payload) > policy.max_image_bytes * 4 // 3 + 4:
            raise invalid(where, f"the image is larger than {policy.max_image_bytes} bytes")
        try:
            data = base64.b64decode(payload, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise invalid(where, "the image data URL is not valid base64") from exc
    elif url.startswith("file://"):
        if not policy.allow_file_urls:
            raise invalid(where, "file:// image URLs are not allowed on this server")
        path = Path(urllib.parse.unquote(urllib.parse.urlparse(url).path))
        if not path.is_file():
            raise invalid(where, f"no image file at {path}")
        if path.stat().st_size > policy.max_image_bytes:
            raise invalid(where, f"the image is larger than {policy.max_image_bytes} bytes")
        data = path.read_bytes()
    else:
        raise invalid(where, "image URLs must be data: URLs (the server fetches nothing from the network)")
    if not data:
        raise invalid(where, "the image is empty")
    try:  # decoded in full here; MNN reads the pixels back from a plain BMP (runtime/image_decode.py)
        return _private_file(request, lambda out: write_decoded_image(data, out), ".bmp", "img")
    except MediaRefused as exc:
        raise invalid(where, str(exc)) from exc


def _audio_file(spec: Any, where: str, policy: MediaPolicy, request: ChatRequest) -> str:
    """OpenAI's ``input_audio`` part (``{"data": base64, "format": "wav"}``) as a private WAV file."""
    if not policy.model_is_audio:
        raise invalid(where, "this model does not take sound (an audio model, e.g. Qwen2-Audio, does)")
    if not isinstance(spec, Mapping) or not isinstance(spec.get("data"), str):
        raise invalid(f"{where}.input_audio", "must be {\"data\": base64, \"format\": \"wav\"}")
    if spec.get("format", "wav") != "wav":
        raise invalid(f"{where}.input_audio.format", f"MNN reads WAV only (got {spec.get('format')!r})")
    if len(request.media_files) >= MAX_IMAGES:
        raise invalid(where, f"at most {MAX_IMAGES} images and sounds per request")
    if len(spec["data"]) > policy.max_image_bytes * 4 // 3 + 4:
        raise invalid(where, f"the sound is larger than {policy.max_image_bytes} bytes")
    try:
        data = base64.b64decode(spec["data"], validate=True)
    except (binascii.Error, ValueError) as exc:
        raise invalid(where, "the sound is not valid base64") from exc
    try:
        read_wav_header(data)
    except MediaRefused as exc:
        raise invalid(where, str(exc)) from exc
    return _private_file(request, lambda out: out.write(data), ".wav", "audio")


def _private_file(request: ChatRequest, write: Callable[[BinaryIO], object], suffix: str, kind: str) -> str:
    """A file ``write`` fills in the request's private directory (mode 0600 in 0700), registered for MNN
    until cleanup(); removed again if ``write`` raises."""
    if request.media_dir is None:
        request.media_dir = tempfile.mkdtemp(prefix="media-", dir=scratch_dir())  # mode 0700
    path = Path(request.media_dir) / f"{len(request.media_files)}{suffix}"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
    except BaseException:
        path.unlink(missing_ok=True)
        raise
    request.media_files.append(path)
    media.register(path, kind)  # its tag may reach MNN's tokenizer until cleanup()
    return str(path)


def _tool_calls_text(tool_calls: Any, where: str) -> str:
    """An assistant message's earlier tool calls, written back as the model wrote them."""
    if not isinstance(tool_calls, list):
        raise invalid(f"{where}.tool_calls", "must be a list")
    parts = []
    for call in tool_calls:
        function = call.get("function") if isinstance(call, Mapping) else None
        if not isinstance(function, Mapping) or not isinstance(function.get("name"), str):
            raise invalid(f"{where}.tool_calls", "each tool call needs function.name")
        arguments = function.get("arguments", "{}")
        if isinstance(arguments, str):
            with contextlib.suppress(json.JSONDecodeError):
                arguments = json.loads(arguments)
        parts.append(TOOL_OPEN + json.dumps({"name": function["name"], "arguments": arguments},
                                            ensure_ascii=False) + TOOL_CLOSE)
    return "\n".join(parts)


def prompt_opens_thinking(prompt: str) -> bool:
    """True when the rendered prompt leaves a ``<think>`` block open (the
    template started the reasoning for the model)."""
    return prompt.rfind(THINK_OPEN) > prompt.rfind(THINK_CLOSE)


# ---------------------------------------------------------------- output
@dataclass
class Delta:
    """One piece of parsed output: ``kind`` is content, reasoning, tool_call
    (a whole call; streamed, the first piece: id, type, name and the
    arguments so far) or tool_call_arguments (more of a streamed call's
    arguments: ``{"index": i, "function": {"arguments": piece}}``)."""

    kind: str
    text: str = ""
    tool_call: dict[str, Any] | None = None


class OutputParser:
    """Splits streamed model text into reasoning, content and tool calls.

    Text that might be the start of a tag is held back until the next piece
    tells; ``finish()`` flushes it. A closed ``<tool_call>`` whose body is not
    valid JSON is passed through as plain content; one left open at the end
    (cut by ``max_tokens``) is a tool call with the arguments generated so
    far, as OpenAI returns a cut call (never the model's markup as content).

    With ``stream_arguments`` (OpenAI's streamed chat), a call is sent as it
    is generated, as OpenAI streams one: its id, type and name once they are
    known, then its arguments piece by piece (partial-object clients such as
    instructor's ``create_partial`` see progress). The pieces join to the
    call's ``arguments``: the model's own text of the arguments object.
    """

    def __init__(self, *, in_reasoning: bool = False, parse_tools: bool = False,
                 stream_arguments: bool = False) -> None:
        self.mode = "reasoning" if in_reasoning else "content"
        self.parse_tools = parse_tools
        self.stream_arguments = stream_arguments
        self.buffer = ""
        self.tool_calls: list[dict[str, Any]] = []
        self._seen_content = False
        self._strip_leading = False
        self._streamed: dict[str, Any] | None = None  # the call being streamed (its name is sent)
        self._sent = 0  # characters of its arguments sent
        self._arguments_end: int | None = None  # where its arguments object ends, once it is whole

    def _tags(self) -> list[str]:
        if self.mode == "reasoning":
            return [THINK_CLOSE]
        if self.mode == "tool":
            return [TOOL_CLOSE]
        tags = [TOOL_OPEN] if self.parse_tools else []
        if not self._seen_content:
            tags.append(THINK_OPEN)
        return tags

    def feed(self, text: str) -> list[Delta]:
        self.buffer += text
        out: list[Delta] = []
        while True:
            tags = self._tags()
            found = min(((pos, t) for t in tags if (pos := self.buffer.find(t)) >= 0), default=None)
            if found is None:
                keep = _partial_tag_suffix(self.buffer, tags)
                if self.mode != "tool":
                    self._emit(self.buffer[: len(self.buffer) - keep], out)
                    self.buffer = self.buffer[len(self.buffer) - keep:]
                elif self.stream_arguments:
                    self._stream_call(self.buffer[: len(self.buffer) - keep], out)
                return out
            pos, tag = found
            before, self.buffer = self.buffer[:pos], self.buffer[pos + len(tag):]
            if self.mode == "tool":
                self._finish_tool(before, out)
                self.mode = "content"
            elif tag == THINK_OPEN and before.strip():  # not at the start: plain text
                self._emit(before + tag, out)
            elif tag == THINK_OPEN:
                self._emit(before, out)
                self.mode = "reasoning"
            elif tag == THINK_CLOSE:
                self._emit(before, out)
                self.mode = "content"
                self._strip_leading = True
            else:  # TOOL_OPEN
                self._emit(before, out)
                self.mode = "tool"

    def finish(self) -> list[Delta]:
        out: list[Delta] = []
        if self.mode == "tool":  # a call cut off: what of it was generated
            self.mode = "content"
            if self._streamed is not None:
                self._end_streamed(self.buffer, out, cut=True)
            else:
                self._add_call(partial_tool_call(self.buffer), out)
        else:
            self._emit(self.buffer, out)
        self.buffer = ""
        return out

    def _emit(self, text: str, out: list[Delta]) -> None:
        if self.mode == "content" and self._strip_leading:
            text = text.lstrip()
            if text:
                self._strip_leading = False
        if not text:
            return
        kind = "reasoning" if self.mode == "reasoning" else "content"
        if kind == "content" and text.strip():
            self._seen_content = True
        if out and out[-1].kind == kind:
            out[-1].text += text
        else:
            out.append(Delta(kind, text))

    def _finish_tool(self, body: str, out: list[Delta]) -> None:
        if self._streamed is not None:
            self._end_streamed(body, out)
            return
        call = parse_tool_call(body)
        if call is None:
            self.mode = "content"
            self._emit(TOOL_OPEN + body + TOOL_CLOSE, out)
            return
        self._add_call(call, out)

    def _add_call(self, call: dict[str, Any], out: list[Delta]) -> None:
        call["index"] = len(self.tool_calls)
        self.tool_calls.append(call)
        out.append(Delta("tool_call", tool_call=call))

    def _stream_call(self, body: str, out: list[Delta]) -> None:
        """Send what is new of the open call: its start once the name is
        whole and an arguments object has begun, then its arguments, holding
        back closing braces and spaces (the call's own ``}`` may be among them)."""
        found = _CALL_ARGUMENTS.search(body)
        if found is None:
            return
        start = found.end()
        if self._streamed is None:
            name = _call_name(body, found.start())
            if name is None or not body[start:].lstrip().startswith("{"):
                return  # no name yet, or arguments that are not an object: the call is sent whole at its end
            call_id, index = "call_" + secrets.token_hex(12), len(self.tool_calls)
            self._streamed = {"id": call_id, "type": "function", "function": {"name": name, "arguments": ""},
                              "index": index}
            self.tool_calls.append(self._streamed)  # its arguments grow as they are sent
            self._sent, self._arguments_end = 0, None
            out.append(Delta("tool_call", tool_call={"index": index, "id": call_id, "type": "function",
                                                     "function": {"name": name, "arguments": ""}}))
        text = body[start:].lstrip()
        ready = len(text.rstrip("} \t\r\n"))
        if self._arguments_end is None and "}" in text[self._sent:]:  # perhaps the object is whole now
            with contextlib.suppress(ValueError, RecursionError):
                self._arguments_end = _DECODER.raw_decode(text)[1]
        if self._arguments_end is not None:  # never send past the end of the arguments object
            ready = self._arguments_end
        self._send_arguments(text[:ready], out)

    def _send_arguments(self, text: str, out: list[Delta]) -> None:
        call = self._streamed
        assert call is not None
        if len(text) > self._sent:
            piece, self._sent = text[self._sent:], len(text)
            call["function"]["arguments"] += piece
            out.append(Delta("tool_call_arguments", tool_call={"index": call["index"],
                                                               "function": {"arguments": piece}}))

    def _end_streamed(self, body: str, out: list[Delta], cut: bool = False) -> None:
        """The rest of a streamed call's arguments: up to the end of its
        arguments object (or, cut off or malformed, all that was generated)."""
        assert self._streamed is not None
        found = _CALL_ARGUMENTS.search(body)
        text = body[found.end():].lstrip() if found else ""
        try:
            text = text[:_DECODER.raw_decode(text)[1]]
        except (ValueError, RecursionError):
            text = text.rstrip()
            if not cut and text.endswith("}"):
                text = text[:-1].rstrip()  # the call's own closing brace
        if text.startswith(self._streamed["function"]["arguments"]):  # else what was sent cannot be mended
            self._send_arguments(text, out)
        self._streamed = None


def _partial_tag_suffix(text: str, tags: list[str]) -> int:
    """Length of the longest suffix of ``text`` that starts one of ``tags``."""
    best = 0
    for tag in tags:
        for n in range(min(len(tag) - 1, len(text)), best, -1):
            if text.endswith(tag[:n]):
                best = n
                break
    return best


_DECODER = json.JSONDecoder()


def parse_tool_call(body: str) -> dict[str, Any] | None:
    """OpenAI tool call from Qwen's ``{"name": ..., "arguments": ...}``, or None.
    An arguments object keeps the model's own text (as a streamed call's
    pieces join to it)."""
    try:
        data = json.loads(body)
    except (json.JSONDecodeError, RecursionError):
        return None
    if not isinstance(data, dict) or not isinstance(data.get("name"), str) or not data["name"]:
        return None
    arguments = data.get("arguments", data.get("parameters", {}))
    if not isinstance(arguments, str):
        arguments = _own_text(body, arguments)
    return {"id": "call_" + secrets.token_hex(12), "type": "function",
            "function": {"name": data["name"], "arguments": arguments}}


def _own_text(body: str, arguments: Any) -> str:
    """The model's text of the arguments value in a call's body (it decodes to
    ``arguments``), else their JSON."""
    found = _CALL_ARGUMENTS.search(body)
    if found is not None and isinstance(arguments, dict):
        text = body[found.end():].lstrip()
        try:
            value, end = _DECODER.raw_decode(text)
        except (ValueError, RecursionError):
            value, end = None, 0
        if value == arguments:
            return text[:end]
    return json.dumps(arguments, ensure_ascii=False)


_CALL_NAME = re.compile(r'"name"\s*:\s*"((?:[^"\\]|\\.)*)"')
_CALL_ARGUMENTS = re.compile(r'"(?:arguments|parameters)"\s*:\s*')


def partial_tool_call(body: str) -> dict[str, Any]:
    """The tool call of an unterminated ``{"name": ..., "arguments": ...}``:
    the name if it was generated whole, the arguments' text as far as it
    goes (OpenAI's shape for a call cut by max_tokens)."""
    arguments = _CALL_ARGUMENTS.search(body)
    name = _call_name(body, arguments.start() if arguments else len(body)) or ""
    return {"id": "call_" + secrets.token_hex(12), "type": "function",
            "function": {"name": name, "arguments": body[arguments.end():].rstrip() if arguments else ""}}


def _call_name(body: str, before: int) -> str | None:
    """The call's name, when it was generated whole before ``before``."""
    named = _CALL_NAME.search(body, 0, before)
    try:
        return json.loads(f'"{named.group(1)}"') if named else None
    except json.JSONDecodeError:
        return None


# ---------------------------------------------------------------- responses
@dataclass
class Completion:
    """Identity shared by every chunk of one response."""

    model: str
    fingerprint: str
    id: str = field(default_factory=lambda: "chatcmpl-" + secrets.token_hex(12))
    created: int = field(default_factory=lambda: int(time.time()))

    def _envelope(self, kind: str, choices: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
        return {"id": self.id, "object": kind, "created": self.created, "model": self.model,
                "system_fingerprint": self.fingerprint, "choices": choices, **extra}

    def chunk(self, delta: dict[str, Any], finish_reason: str | None = None,
              logprobs: dict[str, Any] | None = None) -> dict[str, Any]:
        return self._envelope("chat.completion.chunk", [{"index": 0, "delta": delta, "logprobs": logprobs,
                                                         "finish_reason": finish_reason}])

    def usage_chunk(self, usage: dict[str, Any]) -> dict[str, Any]:
        return self._envelope("chat.completion.chunk", [], usage=usage)

    def response(self, message: dict[str, Any], finish_reason: str, usage: dict[str, Any],
                 logprobs: dict[str, Any] | None) -> dict[str, Any]:
        return self._envelope("chat.completion", [{"index": 0, "message": message, "logprobs": logprobs,
                                                   "finish_reason": finish_reason}], usage=usage)


def delta_dict(delta: Delta) -> dict[str, Any]:
    if delta.kind in ("tool_call", "tool_call_arguments"):
        return {"tool_calls": [delta.tool_call]}
    if delta.kind == "reasoning":
        return {"reasoning_content": delta.text}
    return {"content": delta.text}


def message_from(deltas: list[Delta]) -> dict[str, Any]:
    """The assistant message of a non-streamed response."""
    content = "".join(d.text for d in deltas if d.kind == "content")
    reasoning = "".join(d.text for d in deltas if d.kind == "reasoning")
    calls = [{k: v for k, v in d.tool_call.items() if k != "index"} for d in deltas if d.kind == "tool_call"]
    # refusal: required by OpenAI's schema (ChatCompletionResponseMessage); a local model never refuses by flag
    message: dict[str, Any] = {"role": "assistant", "content": content if content or not calls else None,
                               "refusal": None}
    if reasoning:
        message["reasoning_content"] = reasoning
    if calls:
        message["tool_calls"] = calls
    return message


def finish_reason(result: GenerationResult, tool_calls: bool = False) -> str:
    """Why the answer ended, as every dialect names it (the one mapping):
    ``length``, ``stop``, or ``tool_calls`` when it stopped after calling a tool."""
    if result.finish_reason == "length":
        return "length"
    return "tool_calls" if tool_calls and result.finish_reason == "stop" else "stop"


def logprobs_object(entries: tuple[TokenLogprob, ...] | None, token_bytes) -> dict[str, Any] | None:
    """OpenAI's ``logprobs`` object; ``token_bytes(id)`` gives a token's bytes."""
    if entries is None:
        return None

    def item(token: int, logprob: float) -> dict[str, Any]:
        raw = token_bytes(token)
        return {"token": raw.decode("utf-8", "replace"), "logprob": finite_logprob(logprob), "bytes": list(raw)}

    return {"content": [
        {**item(e.token_id, e.logprob), "top_logprobs": [item(t, lp) for t, lp in e.top]} for e in entries
    ], "refusal": None}  # required beside content by OpenAI's schema


def finite_logprob(value: float) -> float:
    return value if math.isfinite(value) else -9999.0
