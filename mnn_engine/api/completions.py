"""OpenAI's legacy text completions (``/v1/completions``): the request, the
response envelope, legacy log-probabilities and usage. No Tornado, no Engine."""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..runtime.generation import GenerationResult, TokenLogprob
from .openai_chat import SAMPLING_FIELDS, Completion, bad, boolean_field, finite_logprob

#: OpenAI's default for this route
DEFAULT_MAX_TOKENS = 16


MAX_LEGACY_LOGPROBS = 5


UNSUPPORTED = ("suffix",)


@dataclass
class CompletionRequest:
    prompt: str | list[int]
    sampling: dict[str, Any]
    stream: bool = False
    include_usage: bool = False
    echo: bool = False


def parse_completion_request(body: Any) -> CompletionRequest:
    """Validate a legacy completions body (unknown fields are ignored)."""
    if not isinstance(body, Mapping):
        raise bad("body", "the request body must be a JSON object")
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
        prompt = prompt[0]  # a batch of one
    if isinstance(prompt, list):
        if not prompt or not all(isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in prompt):
            raise bad("prompt", "'prompt' must be text, token ids, or a list of one of them (no batches)")
    elif not isinstance(prompt, str) or not prompt:
        raise bad("prompt", "'prompt' must be non-empty text or token ids")
    for name in UNSUPPORTED:
        if body.get(name) not in (None, ""):
            raise bad(name, f"'{name}' is not supported")
    for name in ("n", "best_of"):
        if body.get(name) not in (None, 1):
            raise bad(name, f"only {name}=1 is supported")
    sampling: dict[str, Any] = {name: body[name] for name in SAMPLING_FIELDS if body.get(name) is not None}
    max_tokens = body.get("max_tokens", DEFAULT_MAX_TOKENS)
    if max_tokens is not None:
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int):
            raise bad("max_tokens", "'max_tokens' must be an integer (-1 for no limit)")
        sampling["max_tokens"] = max_tokens
    if body.get("stop") is not None:
        sampling["stop"] = body["stop"]
    logprobs = body.get("logprobs")
    if logprobs is not None:
        if isinstance(logprobs, bool) or not isinstance(logprobs, int) or not 0 <= logprobs <= MAX_LEGACY_LOGPROBS:
            raise bad("logprobs", f"'logprobs' must be an integer from 0 to {MAX_LEGACY_LOGPROBS}")
        sampling.update(logprobs=True, top_logprobs=logprobs)
    echo = boolean_field(body, "echo")
    if echo and logprobs is not None:
        raise bad("echo", "'echo' with 'logprobs' is not supported (the prompt's log-probabilities are not computed)")
    if body.get("response_format") is not None:
        sampling["response_format"] = body["response_format"]
    request = CompletionRequest(prompt=prompt, sampling=sampling, stream=boolean_field(body, "stream"), echo=echo)
    options = body.get("stream_options")
    if options is not None:
        if not isinstance(options, Mapping):
            raise bad("stream_options", "'stream_options' must be an object")
        request.include_usage = boolean_field(options, "include_usage")
    return request


def legacy_logprobs(entries: tuple[TokenLogprob, ...] | None, token_bytes, offset: int) -> dict[str, Any] | None:
    """The completions route's ``logprobs``: tokens, their log-probabilities,
    the most likely alternatives and each token's offset in the text."""
    if entries is None:
        return None
    out: dict[str, Any] = {"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []}
    for entry in entries:
        text = token_bytes(entry.token_id).decode("utf-8", "replace")
        out["tokens"].append(text)
        out["token_logprobs"].append(finite_logprob(entry.logprob))
        out["top_logprobs"].append({token_bytes(t).decode("utf-8", "replace"): finite_logprob(lp)
                                    for t, lp in entry.top})
        out["text_offset"].append(offset)
        offset += len(text)
    return out


@dataclass
class TextCompletion(Completion):
    """The identity of one legacy completion (``cmpl-`` ids)."""

    id: str = field(default_factory=lambda: "cmpl-" + secrets.token_hex(12))

    def envelope(self, text: str, finish_reason: str | None, logprobs: Any = None, **extra: Any) -> dict[str, Any]:
        return {"id": self.id, "object": "text_completion", "created": self.created, "model": self.model,
                "system_fingerprint": self.fingerprint,
                "choices": [{"text": text, "index": 0, "logprobs": logprobs, "finish_reason": finish_reason}],
                **extra}


def legacy_usage(result: GenerationResult) -> dict[str, Any]:
    return {k: result.usage[k] for k in ("prompt_tokens", "completion_tokens", "total_tokens")}
