"""OpenAI's legacy text completions (``/v1/completions``): the request, the
response envelope, legacy log-probabilities and usage. No Tornado, no Engine."""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from typing import Any

from ..checks import integer, invalid, is_int, obj
from ..runtime.generation import ScoreResult, TokenLogprob
from .openai_chat import SAMPLING_FIELDS, Completion, boolean_field, finite_logprob

#: OpenAI's default for this route
DEFAULT_MAX_TOKENS = 16


MAX_LEGACY_LOGPROBS = 5
#: prompts one request may list (each is a choice; they run in turn, in the request's one queue slot)
MAX_PROMPTS = 64


UNSUPPORTED = ("suffix",)


@dataclass
class CompletionRequest:
    prompts: list[str | list[int]]
    sampling: dict[str, Any]
    stream: bool = False
    include_usage: bool = False
    echo: bool = False
    #: ``max_tokens: 0`` with ``echo``: the prompt (and its log-probabilities) only, nothing generated
    generate: bool = True

    @property
    def prompt_logprobs(self) -> int | None:
        """How many alternatives each echoed prompt token gets, when its log-probabilities are asked for."""
        return self.sampling.get("top_logprobs") if self.echo and self.sampling.get("logprobs") else None

    def reads_prompt(self, prompt: str | list[int]) -> bool:
        """Whether echoing ``prompt`` needs the model before its answer: for its log-probabilities, its
        token count (scoring only: no generation counts it) or the text of token ids."""
        return self.echo and (self.prompt_logprobs is not None or not self.generate or not isinstance(prompt, str))


def _is_prompt(value: Any) -> bool:
    """Non-empty text or a non-empty list of token ids."""
    if isinstance(value, str):
        return bool(value)
    return isinstance(value, list) and bool(value) and all(
        is_int(t) and t >= 0 for t in value)


def _prompts(prompt: Any) -> list[str | list[int]]:
    """``prompt`` as a list of prompts: text, token ids, or a list of either (OpenAI's four forms)."""
    if _is_prompt(prompt):
        return [prompt]
    if isinstance(prompt, list) and prompt and all(isinstance(p, (str, list)) for p in prompt):
        if len(prompt) > MAX_PROMPTS:
            raise invalid("prompt", f"at most {MAX_PROMPTS} prompts per request ({len(prompt)} given)")
        for index, item in enumerate(prompt):
            if not _is_prompt(item):
                raise invalid("prompt", f"item {index} must be non-empty text or token ids")
        return list(prompt)
    raise invalid("prompt", "must be non-empty text, token ids, or a list of either")


def parse_completion_request(body: Any) -> CompletionRequest:
    """Validate a legacy completions body (unknown fields are ignored)."""
    obj(body, "body")
    prompts = _prompts(body.get("prompt"))
    for name in UNSUPPORTED:
        if body.get(name) not in (None, ""):
            raise invalid(name, "is not supported")
    for name in ("n", "best_of"):
        if body.get(name) not in (None, 1):
            raise invalid(name, "only 1 is supported")
    sampling: dict[str, Any] = {name: body[name] for name in SAMPLING_FIELDS if body.get(name) is not None}
    echo = boolean_field(body, "echo")
    generate = True
    max_tokens = body.get("max_tokens", DEFAULT_MAX_TOKENS)
    if max_tokens is not None:
        integer(max_tokens, "max_tokens", why="-1: no limit")
        if max_tokens == 0:
            if not echo:
                raise invalid("max_tokens", "0 leaves nothing to answer without 'echo'")
            generate = False  # the prompt and its log-probabilities: scoring only
        else:
            sampling["max_tokens"] = max_tokens
    if body.get("stop") is not None:
        sampling["stop"] = body["stop"]
    logprobs = body.get("logprobs")
    if logprobs is not None:
        integer(logprobs, "logprobs", low=0, high=MAX_LEGACY_LOGPROBS)
        sampling.update(logprobs=True, top_logprobs=logprobs)
    if body.get("response_format") is not None:
        sampling["response_format"] = body["response_format"]
    request = CompletionRequest(prompts=prompts, sampling=sampling, stream=boolean_field(body, "stream"), echo=echo,
                                generate=generate)
    options = obj(body.get("stream_options"), "stream_options", nullable=True)
    if options is not None:
        request.include_usage = boolean_field(options, "include_usage")
    return request


def legacy_logprobs(entries: tuple[TokenLogprob, ...] | None, token_bytes, offset: int) -> dict[str, Any] | None:
    """The completions route's ``logprobs``: tokens, their log-probabilities,
    the most likely alternatives and each token's offset in the text."""
    if entries is None:
        return None
    return _legacy([(e.token_id, e.logprob, e.top) for e in entries], token_bytes, offset)


def echoed_logprobs(ids: list[int], scored: ScoreResult | None, token_bytes) -> dict[str, Any]:
    """The echoed prompt's ``logprobs`` (its first token has none: ``null``, as OpenAI's legacy API gave), from
    scoring ``ids[1:]`` after ``ids[:1]`` (``scored``; None for a one-token prompt)."""
    rows: list[tuple[int, float | None, Any]] = [(ids[0], None, None)]
    if scored is not None:
        rows += list(zip(ids[1:], scored.logprobs, scored.top or [()] * len(scored.logprobs), strict=True))
    return _legacy(rows, token_bytes, 0)


def joined_logprobs(first: dict[str, Any] | None, then: dict[str, Any] | None) -> dict[str, Any] | None:
    """Two ``logprobs`` objects as one (the echoed prompt's, then the answer's)."""
    if first is None or then is None:
        return first or then
    return {key: first[key] + then[key] for key in first}


def _legacy(rows: list[tuple[int, float | None, Any]], token_bytes, offset: int) -> dict[str, Any]:
    out: dict[str, Any] = {"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []}
    for token, logprob, top in rows:
        text = token_bytes(token).decode("utf-8", "replace")
        out["tokens"].append(text)
        out["token_logprobs"].append(None if logprob is None else finite_logprob(logprob))
        out["top_logprobs"].append(None if top is None else {
            token_bytes(t).decode("utf-8", "replace"): finite_logprob(lp) for t, lp in top})
        out["text_offset"].append(offset)
        offset += len(text)
    return out


@dataclass
class TextCompletion(Completion):
    """The identity of one legacy completion (``cmpl-`` ids)."""

    id: str = field(default_factory=lambda: "cmpl-" + secrets.token_hex(12))

    def envelope(self, text: str, finish_reason: str | None, logprobs: Any = None, index: int = 0,
                 **extra: Any) -> dict[str, Any]:
        return self.of_choices([choice(text, finish_reason, logprobs, index)], **extra)

    def of_choices(self, choices: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
        return {"id": self.id, "object": "text_completion", "created": self.created, "model": self.model,
                "system_fingerprint": self.fingerprint, "choices": choices, **extra}


def choice(text: str, finish_reason: str | None, logprobs: Any = None, index: int = 0) -> dict[str, Any]:
    return {"text": text, "index": index, "logprobs": logprobs, "finish_reason": finish_reason}


def legacy_usage(prompt_tokens: int, completion_tokens: int) -> dict[str, Any]:
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens}
