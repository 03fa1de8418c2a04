"""Per-request generation settings, validated, with OpenAI's names."""

from __future__ import annotations

import math
import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

from .. import _mnn
from ..checks import boolean, choice, integer, invalid, number, obj

#: the native loop takes C ints
INT32_MAX = 2**31 - 1
MAX_STOP_STRINGS = 16
MAX_TOP_LOGPROBS = 20
#: Speculative decoding: "ngram" (prompt-lookup drafts) or "off"
SPECULATIVE = ("ngram", "off")
#: Most draft tokens one verification may check
MAX_DRAFT_TOKENS = 15
#: What a chat that outgrows the context gets: an error, or its oldest messages dropped
CONTEXT_OVERFLOW = ("error", "truncate")
_SURROGATE = re.compile("[\ud800-\udfff]")


@dataclass(frozen=True)
class GenerationConfig:
    """Sampling and stopping for one generation.

    Fields left as ``None`` take the model's defaults (its ``config.json``
    sampler settings). ``temperature=0`` is greedy decoding.
    ``max_tokens=None`` or ``-1`` generates until an end token or the context
    limit. ``logprobs=True`` records the chosen token's log-probability and
    ``top_logprobs`` alternatives (0..20). ``cache_prompt`` keeps the part
    of the KV cache that the prompt shares with the previous prompt (a
    conversation's earlier turns) and prefills only the rest; None follows
    ``Llm.prompt_cache`` (on by default; outputs are the same either way).
    ``context_overflow="truncate"`` drops a chat's oldest messages
    after the system prompt, whole, until the prompt and ``max_tokens`` (or
    256 tokens) fit; ``GenerationResult.dropped_messages`` says how many.
    The default, ``"error"``, answers ``context_length_exceeded``.
    ``response_format`` (OpenAI's: ``{"type": "json_object"}`` or
    ``{"type": "json_schema", "json_schema": {"schema": ...}}``) and
    ``grammar`` (Lark or GBNF text, or ``{"json_schema"|"lark"|"gbnf"|"regex": ...}``)
    constrain every token (``mnn_engine.runtime.structured``; needs the ``structured``
    extra). A ``max_tokens`` cut-off can still leave the output incomplete
    (``finish_reason`` ``length``).
    ``speculative`` (``"ngram"`` or ``"off"``; None follows
    ``Llm.speculative``) drafts tokens by prompt lookup and verifies up to
    ``draft_tokens`` of them in one forward; every kept token is the one the
    sampler draws at its position (see ``Llm``).
    """

    max_tokens: int | None = None
    temperature: float | None = None
    top_k: int | None = None
    top_p: float | None = None
    min_p: float | None = None
    repetition_penalty: float | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    logit_bias: Mapping[int, float] = field(default_factory=dict)
    seed: int | None = None
    stop: tuple[str, ...] = ()
    logprobs: bool = False
    top_logprobs: int | None = None
    ignore_eos: bool = False
    cache_prompt: bool | None = None
    context_overflow: str = "error"
    response_format: Mapping[str, Any] | None = None
    grammar: Any = None
    speculative: str | None = None
    draft_tokens: int | None = None

    @classmethod
    def from_kwargs(cls, base: GenerationConfig | None = None, **kwargs: Any) -> GenerationConfig:
        """Build from keyword arguments (OpenAI names), on top of ``base``."""
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(kwargs) - names)
        if unknown:
            raise invalid(unknown[0], f"unknown generation option (known: {', '.join(sorted(names))})")
        if "stop" in kwargs:
            kwargs["stop"] = _stop_tuple(kwargs["stop"])
        if "logit_bias" in kwargs:
            kwargs["logit_bias"] = _bias_dict(kwargs["logit_bias"])
        config = replace(base, **kwargs) if base is not None else cls(**kwargs)
        config.validate()
        return config

    def validate(self) -> None:
        """Raise ``MnnEngineError('invalid_argument')`` for any value out of range (``mnn_engine.checks``)."""
        choice(self.context_overflow, "context_overflow", CONTEXT_OVERFLOW)
        boolean(self.logprobs, "logprobs")
        boolean(self.ignore_eos, "ignore_eos")
        boolean(self.cache_prompt, "cache_prompt", nullable=True)
        choice(self.speculative, "speculative", SPECULATIVE, nullable=True)
        integer(self.draft_tokens, "draft_tokens", low=1, high=MAX_DRAFT_TOKENS, nullable=True)
        integer(self.max_tokens, "max_tokens", low=-1, high=INT32_MAX, nullable=True, why="-1: no limit")
        if self.max_tokens == 0:
            raise invalid("max_tokens", "must be at least 1, or -1 or none for no limit (got 0)")
        number(self.temperature, "temperature", low=0, nullable=True)
        integer(self.top_k, "top_k", low=0, high=INT32_MAX, nullable=True, why="0 disables it")
        number(self.top_p, "top_p", low=0, above=True, high=1, nullable=True)
        number(self.min_p, "min_p", low=0, high=1, nullable=True)
        number(self.repetition_penalty, "repetition_penalty", low=0, above=True, nullable=True)
        number(self.presence_penalty, "presence_penalty", low=-2, high=2, nullable=True)
        number(self.frequency_penalty, "frequency_penalty", low=-2, high=2, nullable=True)
        obj(self.logit_bias, "logit_bias")
        for token, bias in self.logit_bias.items():
            integer(token, "logit_bias", low=0, why="token ids")
            if bias != -math.inf:
                number(bias, f"logit_bias[{token}]", low=-100, high=100, why="or -inf: never")
        integer(self.seed, "seed", low=-(2**63), high=2**64 - 1, nullable=True)
        if len(self.stop) > MAX_STOP_STRINGS:
            raise invalid("stop", f"at most {MAX_STOP_STRINGS} stop strings (got {len(self.stop)})")
        integer(self.top_logprobs, "top_logprobs", low=0, high=MAX_TOP_LOGPROBS, nullable=True)
        if self.top_logprobs is not None and not self.logprobs:
            raise invalid("top_logprobs", "needs logprobs=true")

    def resolved(self, defaults: Mapping[str, Any], vocab_size: int) -> _mnn.GenerationSettings:
        """The native loop's settings, with the sampler's filled in (model
        defaults for options left unset); the prepared generation sets the rest."""
        for token in self.logit_bias:
            if int(token) >= vocab_size:
                raise invalid("logit_bias", f"token {token} is outside the vocabulary (size {vocab_size})")

        def pick(name: str, fallback: float) -> Any:
            value = getattr(self, name)
            if value is not None:
                return value
            value = defaults.get(name)
            return fallback if value is None else value

        return _mnn.GenerationSettings(
            temperature=float(pick("temperature", 1.0)),
            top_k=int(pick("top_k", 0)),
            top_p=float(pick("top_p", 1.0)),
            min_p=float(pick("min_p", 0.0)),
            repetition_penalty=float(pick("repetition_penalty", 1.0)),
            presence_penalty=float(pick("presence_penalty", 0.0)),
            frequency_penalty=float(pick("frequency_penalty", 0.0)),
            top_logprobs=(self.top_logprobs or 0) if self.logprobs else -1,
            logit_bias={int(t): float(b) for t, b in self.logit_bias.items()},
        )

    def effective_seed(self) -> int:
        """The seed to use: the given one (as unsigned 64-bit) or a fresh random one."""
        if self.seed is None:
            return secrets.randbits(64)
        return self.seed % 2**64


def _stop_tuple(stop: Any) -> tuple[str, ...]:
    if stop is None:
        return ()
    if isinstance(stop, str):
        stop = [stop]
    if not isinstance(stop, (list, tuple)) or not all(isinstance(item, str) and item for item in stop):
        raise invalid("stop", f"must be a string or a list of non-empty strings (got {stop!r})")
    for item in stop:
        if not is_valid_unicode(item):
            raise invalid("stop", "strings must be valid Unicode (no lone surrogates)")
    return tuple(stop)


def is_valid_unicode(text: str) -> bool:
    """False for text with lone surrogates (JSON's "\\ud800"), which is not UTF-8."""
    return _SURROGATE.search(text) is None


def _bias_dict(bias: Any) -> Any:
    """Accept OpenAI's JSON form, where token ids are strings of digits."""
    if bias is None:
        return {}
    if not isinstance(bias, Mapping):
        return bias
    out: dict[Any, Any] = {}
    for token, value in bias.items():
        if isinstance(token, str) and token.isascii() and token.isdigit():
            token = int(token)
        out[token] = value
    return out

