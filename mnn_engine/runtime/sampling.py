"""Per-request generation settings, validated, with OpenAI's names."""

from __future__ import annotations

import math
import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

from .. import _mnn
from ..errors import invalid, is_int, is_number

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
        """Raise ``MnnEngineError('invalid_argument')`` for any value out of range."""
        if self.context_overflow not in CONTEXT_OVERFLOW:
            raise invalid("context_overflow", f"must be {' or '.join(CONTEXT_OVERFLOW)}")
        for name in ("logprobs", "ignore_eos", "cache_prompt"):
            value = getattr(self, name)
            if not isinstance(value, bool) and not (name == "cache_prompt" and value is None):
                raise invalid(name, "must be true or false")
        if self.speculative is not None and self.speculative not in SPECULATIVE:
            raise invalid("speculative", f"must be {' or '.join(SPECULATIVE)} (got {self.speculative!r})")
        if self.draft_tokens is not None:
            _int("draft_tokens", self.draft_tokens)
            if not 1 <= self.draft_tokens <= MAX_DRAFT_TOKENS:
                raise invalid("draft_tokens", f"must be from 1 to {MAX_DRAFT_TOKENS} (got {self.draft_tokens})")
        if self.max_tokens is not None:
            _int("max_tokens", self.max_tokens)
            if self.max_tokens == 0 or self.max_tokens < -1:
                raise invalid("max_tokens", f"must be >= 1, or -1/None for no limit (got {self.max_tokens})")
        if self.temperature is not None:
            _number("temperature", self.temperature)
            if self.temperature < 0:
                raise invalid("temperature", f"must be >= 0 (got {self.temperature})")
        if self.top_k is not None:
            _int("top_k", self.top_k)
            if self.top_k < 0:
                raise invalid("top_k", f"must be >= 0, 0 disables it (got {self.top_k})")
        if self.top_p is not None:
            _number("top_p", self.top_p)
            if not 0 < self.top_p <= 1:
                raise invalid("top_p", f"must be in (0, 1] (got {self.top_p})")
        if self.min_p is not None:
            _number("min_p", self.min_p)
            if not 0 <= self.min_p <= 1:
                raise invalid("min_p", f"must be in [0, 1] (got {self.min_p})")
        if self.repetition_penalty is not None:
            _number("repetition_penalty", self.repetition_penalty)
            if self.repetition_penalty <= 0:
                raise invalid("repetition_penalty", f"must be > 0 (got {self.repetition_penalty})")
        for name in ("presence_penalty", "frequency_penalty"):
            value = getattr(self, name)
            if value is not None:
                _number(name, value)
                if not -2 <= value <= 2:
                    raise invalid(name, f"must be in [-2, 2] (got {value})")
        if not isinstance(self.logit_bias, Mapping):
            raise invalid("logit_bias", "must be a mapping of token id to bias")
        for token, bias in self.logit_bias.items():
            _token_id("logit_bias", token)
            if not is_number(bias) or math.isnan(bias):
                raise invalid("logit_bias", f"bias for token {token} must be a number")
            if bias != -math.inf and not -100 <= bias <= 100:
                raise invalid("logit_bias", f"bias for token {token} must be in [-100, 100] or -inf")
        if self.seed is not None:
            _int("seed", self.seed, 2**64)
            if not -(2**63) <= self.seed < 2**64:
                raise invalid("seed", "must fit in 64 bits")
        if len(self.stop) > MAX_STOP_STRINGS:
            raise invalid("stop", f"at most {MAX_STOP_STRINGS} stop strings")
        if self.top_logprobs is not None:
            _int("top_logprobs", self.top_logprobs)
            if not 0 <= self.top_logprobs <= MAX_TOP_LOGPROBS:
                raise invalid("top_logprobs", f"must be in [0, {MAX_TOP_LOGPROBS}]")
            if not self.logprobs:
                raise invalid("top_logprobs", "needs logprobs=True")

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
    if not isinstance(stop, (list, tuple)):
        raise invalid("stop", "must be a string or a list of strings")
    for item in stop:
        if not isinstance(item, str) or not item:
            raise invalid("stop", "stop strings must be non-empty strings")
        if not is_valid_unicode(item):
            raise invalid("stop", "stop strings must be valid Unicode (no lone surrogates)")
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


def _number(name: str, value: Any) -> None:
    if not is_number(value) or not math.isfinite(value):
        raise invalid(name, f"must be a finite number (got {value!r})")


INT32_MAX = 2**31 - 1


def _int(name: str, value: Any, limit: int = INT32_MAX) -> None:
    """An integer of at most ``limit`` in size (the native loop takes C ints)."""
    if not is_int(value):
        raise invalid(name, f"must be an integer (got {value!r})")
    if abs(value) > limit:
        raise invalid(name, f"must be at most {limit} in size (got {value})")


def _token_id(name: str, token: Any) -> None:
    if not is_int(token) or token < 0:
        raise invalid(name, f"token ids must be non-negative integers (got {token!r})")
