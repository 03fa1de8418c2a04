"""``chat --url`` and ``generate --url``: the model of a running server, not
a second copy loaded in this process (on a phone one model is what fits).

``RemoteEngine`` does what ``ChatSession`` and ``generate`` need of an
engine over the server's OpenAI routes, with the standard library only:
``/v1/chat/completions`` streamed (server-sent events, the usage in the last
chunk), ``/v1/completions`` for a raw prompt. Closing the connection (Ctrl-C)
is how the server learns to cancel the generation. The figures of
``last_result`` are the server's token counts with the times measured here
(the first token's arrival, the rest's rate).
"""

from __future__ import annotations

import http.client
import json
import time
import urllib.parse
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from ..checks import invalid
from ..errors import ERROR_CODES, MnnEngineError
from ..runtime.generation import GenerationResult

#: the CLI's sampling options -> the request's fields
_FIELDS = {"max_tokens": "max_tokens", "temperature": "temperature", "seed": "seed",
           "context_overflow": "context_overflow", "response_format": "response_format"}


class RemoteEngine:
    """A server's model (``url``: the server, as ``serve`` prints it; ``model``:
    the name it serves; None: its default)."""

    def __init__(self, url: str, model: str | None = None, api_key: str | None = None,
                 timeout: float = 600.0) -> None:
        parts = urllib.parse.urlsplit(url if "://" in url else f"http://{url}")
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise invalid("url", f"--url {url!r} is not an http:// server address")
        self.url = f"{parts.scheme}://{parts.netloc}"
        self._parts = parts
        self.model = model
        self.api_key = api_key
        self.timeout = timeout
        self.last_result: GenerationResult | None = None

    # ---------------------------------------------------------------- HTTP
    def _connection(self) -> http.client.HTTPConnection:
        kind = http.client.HTTPSConnection if self._parts.scheme == "https" else http.client.HTTPConnection
        return kind(self._parts.hostname, self._parts.port, timeout=self.timeout)

    def _headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        return headers

    def _open(self, method: str, path: str, body: Any = None) -> tuple[http.client.HTTPConnection,
                                                                          http.client.HTTPResponse]:
        conn = self._connection()
        try:
            conn.request(method, path, None if body is None else json.dumps(body), self._headers())
            response = conn.getresponse()
        except OSError as exc:
            conn.close()
            raise MnnEngineError("server_not_running", f"no server answers at {self.url}: "
                                 f"{getattr(exc, 'strerror', None) or exc}") from exc
        if response.status >= 400:
            raw = response.read()
            conn.close()
            raise _error(response.status, raw)
        return conn, response

    def get(self, path: str) -> Any:
        conn, response = self._open("GET", path)
        try:
            return json.loads(response.read())
        finally:
            conn.close()

    def describe(self) -> str:
        """Which model answers, as ``chat`` prints it: "connected to URL: NAME (context N tokens)"."""
        models = self.get("/v1/models").get("data", [])
        health = self.get("/health")
        name = self.model or (health.get("model") or {}).get("name") or "the server's default model"
        entry = next((m for m in models if m.get("id") == name), None)
        if self.model is not None and entry is None:
            raise MnnEngineError("model_not_found", f"{self.url} serves no model {self.model!r} (it serves: "
                                 f"{', '.join(m['id'] for m in models) or 'none'})", param="model")
        context = f" (context {entry['context_length']} tokens)" if entry and entry.get("context_length") else ""
        return f"connected to {self.url}: {name}{context}"

    # ---------------------------------------------------------------- generation
    def _body(self, sampling: Mapping[str, Any]) -> dict[str, Any]:
        body: dict[str, Any] = {"stream": True, "stream_options": {"include_usage": True}}
        if self.model is not None:
            body["model"] = self.model
        for ours, theirs in _FIELDS.items():
            if sampling.get(ours) is not None:
                body[theirs] = sampling[ours]
        if sampling.get("enable_thinking") is not None:
            body["chat_template_kwargs"] = {"enable_thinking": sampling["enable_thinking"]}
        return body

    def _stream(self, path: str, body: dict[str, Any], text_of: Callable[[dict[str, Any]], str]) -> Iterator[str]:
        started = time.perf_counter()
        first: float | None = None
        conn, response = self._open("POST", path, body)
        dropped = int(response.getheader("X-Context-Dropped-Messages") or 0)
        usage: dict[str, Any] = {}
        finish = "stop"
        pieces: list[str] = []
        try:
            for data in _events(response):
                if "error" in data:
                    error = data["error"]
                    raise MnnEngineError(error.get("code") if error.get("code") in ERROR_CODES else "internal_error",
                                         error.get("message", "the server's generation failed"))
                usage = data.get("usage") or usage
                for choice in data.get("choices") or []:
                    finish = choice.get("finish_reason") or finish
                    text = text_of(choice)
                    if text:
                        first = first if first is not None else time.perf_counter()
                        pieces.append(text)
                        yield text
        except GeneratorExit:  # the caller stopped reading (Ctrl-C): closing the connection cancels it
            finish = "cancelled"
            raise
        finally:
            conn.close()
            self.last_result = _result("".join(pieces), finish, usage, started, first, dropped)

    def stream_chat(self, messages: Sequence[Mapping[str, Any]], **sampling: Any) -> Iterator[str]:
        """The server's answer to chat messages, piece by piece."""
        body = {**self._body(sampling), "messages": list(messages)}
        yield from self._stream("/v1/chat/completions", body,
                                lambda choice: (choice.get("delta") or {}).get("content") or "")

    def generate(self, prompt: Any, callback: Callable[[str], Any] | None = None, **sampling: Any) -> GenerationResult:
        """One answer: chat messages, or a raw prompt (text, through /v1/completions)."""
        if isinstance(prompt, str):
            body = {**self._body(sampling), "prompt": prompt}
            body.pop("chat_template_kwargs", None)
            stream = self._stream("/v1/completions", body, lambda choice: choice.get("text") or "")
        else:
            stream = self.stream_chat(prompt, **sampling)
        try:
            for piece in stream:
                if callback is not None:
                    callback(piece)
        finally:
            stream.close()
        assert self.last_result is not None
        return self.last_result

    def close(self) -> None:
        """Nothing is held between requests."""


def _events(response: http.client.HTTPResponse) -> Iterator[dict[str, Any]]:
    """The JSON payloads of a server-sent-events answer, up to ``[DONE]``."""
    for raw in response:
        line = raw.decode("utf-8").rstrip("\r\n")
        if not line.startswith("data:"):
            continue
        payload = line[5:].strip()
        if payload == "[DONE]":
            return
        yield json.loads(payload)


def _error(status: int, raw: bytes) -> MnnEngineError:
    try:
        error = json.loads(raw)["error"]
        code, message = error.get("code"), error.get("message")
    except (ValueError, KeyError, TypeError, AttributeError):
        code, message = None, raw.decode("utf-8", "replace")[:200]
    if code not in ERROR_CODES:
        code = "internal_error" if status >= 500 else "invalid_argument"
    return MnnEngineError(code, f"the server answered {status}: {message}")


def _result(text: str, finish: str, usage: Mapping[str, Any], started: float, first: float | None,
            dropped: int) -> GenerationResult:
    ended = time.perf_counter()
    first = first if first is not None else ended
    completion = int(usage.get("completion_tokens") or 0)
    return GenerationResult(
        text=text, token_ids=(), finish_reason=finish, prompt_tokens=int(usage.get("prompt_tokens") or 0),
        completion_tokens=completion, prefill_ms=(first - started) * 1000, decode_ms=(ended - first) * 1000,
        time_to_first_token_ms=(first - started) * 1000, total_ms=(ended - started) * 1000,
        decode_steps=max(0, completion - 1), seed=0,
        cached_tokens=int((usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0),
        dropped_messages=dropped)
