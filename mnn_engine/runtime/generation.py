"""What a generation is and what it gives back: the prepared generation (checked
and claimed, not started), its result and the scoring result.

The native loop is asked through ``_mnn.GenerationSettings`` and answers with
``_mnn.GenerationOutcome``; both are declared once, in ``src/core/boundary.pxi``.
``GenerationResult.from_outcome`` is the one place that reads an outcome.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .. import _mnn
from .sampling import GenerationConfig

if TYPE_CHECKING:
    from .prompt import Prompt

TokenCallback = Callable[[str], Any]
#: receives the rendered prompt text (None for token ids) and the number of dropped messages
PromptCallback = Callable[[str | None, int, int], Any]


@dataclass(frozen=True)
class TokenLogprob:
    """Log-probability of a generated token, with the most likely alternatives."""

    token_id: int
    logprob: float
    top: tuple[tuple[int, float], ...]


@dataclass(frozen=True)
class GenerationResult:
    """What one generation produced, and how fast.

    ``finish_reason`` is ``stop`` (end token or stop string), ``length``
    (max_tokens or the context limit), ``cancelled`` or ``error``.
    Times are in milliseconds; ``decode_tokens_per_second`` counts the
    tokens decoded after the first (one per forward, plus the drafts a
    speculative verification kept). ``drafted_tokens`` and
    ``accepted_tokens`` count speculative drafts verified and kept;
    ``decode_steps`` the forwards. ``decode_forward_ms`` is the
    part of ``decode_ms`` spent inside MNN's forwards; the rest is this
    package's own per-token work (sampling, stop checks, detokenising,
    callbacks).
    """

    text: str
    token_ids: tuple[int, ...]
    finish_reason: str
    prompt_tokens: int
    completion_tokens: int
    prefill_ms: float
    decode_ms: float
    time_to_first_token_ms: float
    total_ms: float
    decode_steps: int
    seed: int
    logprobs: tuple[TokenLogprob, ...] | None = None
    error: str | None = None
    decode_forward_ms: float = 0.0
    cached_tokens: int = 0  # prompt tokens the KV cache already held (not prefilled again)
    dropped_messages: int = 0  # oldest messages left out to fit the context (context_overflow="truncate")
    drafted_tokens: int = 0
    accepted_tokens: int = 0
    prompt_ids: tuple[int, ...] = ()  # the prompt's token ids as generated from (Ollama's context)

    @classmethod
    def from_outcome(cls, outcome: _mnn.GenerationOutcome, seed: int, dropped_messages: int = 0,
                     prompt_ids: tuple[int, ...] = ()) -> GenerationResult:
        """The result of one run of the native loop."""
        logprobs = None
        if outcome.logprobs is not None:
            logprobs = tuple(TokenLogprob(token, logprob, top) for token, logprob, top in outcome.logprobs)
        return cls(
            text=outcome.text, token_ids=outcome.token_ids, finish_reason=outcome.finish_reason,
            prompt_tokens=outcome.prompt_tokens, completion_tokens=outcome.completion_tokens,
            prefill_ms=outcome.prefill_ms, decode_ms=outcome.decode_ms,
            time_to_first_token_ms=outcome.time_to_first_token_ms, total_ms=outcome.total_ms,
            decode_steps=outcome.decode_steps, seed=seed, logprobs=logprobs,
            error=outcome.error_message or None, decode_forward_ms=outcome.decode_forward_ms,
            cached_tokens=outcome.cached_tokens, dropped_messages=dropped_messages,
            drafted_tokens=outcome.drafted_tokens, accepted_tokens=outcome.accepted_tokens,
            prompt_ids=prompt_ids,
        )

    @property
    def prefill_tokens_per_second(self) -> float:
        return self.prompt_tokens / (self.prefill_ms / 1000) if self.prefill_ms > 0 else 0.0

    @property
    def decode_tokens_per_second(self) -> float:
        tokens = self.decode_steps + self.accepted_tokens
        return tokens / (self.decode_ms / 1000) if self.decode_ms > 0 else 0.0

    @property
    def usage(self) -> dict[str, Any]:
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.prompt_tokens + self.completion_tokens,
            "prompt_tokens_details": {"cached_tokens": self.cached_tokens},
            # OpenAI's Predicted Outputs counts: no request's prediction is used here, so 0; the
            # speculative drafts (this engine's own guesses) are counted under our own name
            "completion_tokens_details": {"accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0},
            "speculative": {"drafted_tokens": self.drafted_tokens, "accepted_tokens": self.accepted_tokens},
        }


@dataclass(frozen=True)
class ScoreResult:
    """Teacher-forced log-probabilities (natural log) of a continuation's
    tokens (``Llm.score``)."""

    token_ids: tuple[int, ...]
    logprobs: tuple[float, ...]
    cancelled: bool = False
    #: with ``top_logprobs``: at each position, the most likely tokens as (token id, log-probability)
    top: tuple[tuple[tuple[int, float], ...], ...] = ()
    #: tokens of the prompt the continuation followed
    prompt_tokens: int = 0

    @property
    def total_logprob(self) -> float:
        return math.fsum(self.logprobs)

    @property
    def perplexity(self) -> float:
        """exp of the mean negative log-probability per token (inf when nothing was scored)."""
        return math.exp(-self.total_logprob / len(self.logprobs)) if self.logprobs else math.inf


@dataclass(frozen=True)
class PreparedGeneration:
    """A generation checked and claimed (``Llm.prepare``), not started yet:
    ``run()`` it once (on any thread) or ``abandon()`` it; either gives the
    claim on the model back. ``settings`` is what the native loop will be
    asked; the model fills in what is known only when it runs (the prompt
    cache and drafting)."""

    claim: ModelClaim
    prompt: Prompt
    enable_thinking: bool | None
    tools: Any
    config: GenerationConfig
    settings: _mnn.GenerationSettings
    grammar: tuple[str, str] | None  # (llguidance grammar, the option it came from)
    #: token ids that come before the prompt's own (Ollama's context: an earlier exchange, continued)
    prefix_ids: tuple[int, ...]
    #: the model's way to run it (renders, tokenizes, generates, then releases the claim)
    runner: Callable[[PreparedGeneration, TokenCallback | None, PromptCallback | None], GenerationResult]

    @property
    def core(self) -> _mnn.LlmCore:
        return self.claim.core

    def run(self, callback: TokenCallback | None = None,
            on_prompt: PromptCallback | None = None) -> GenerationResult:
        """Generate; ``on_prompt(text, dropped, prompt_tokens)`` gets the rendered prompt first."""
        return self.runner(self, callback, on_prompt)

    def abandon(self) -> None:
        """Give the claim back without generating."""
        self.claim.release()



class ModelClaim:
    """A model claimed for one generation, scoring or embedding run (``Llm.claim``):
    a pin that keeps the native core alive, and the model's one generation
    lock. "One generation at a time" is this lock and nothing else; ``busy``
    is its refusal. ``release()`` gives both back (once; later calls do nothing)."""

    def __init__(self, core: _mnn.LlmCore, give_back: Callable[[], None]) -> None:
        self.core = core
        self._give_back: Callable[[], None] | None = give_back
        self._lock = threading.Lock()

    def release(self) -> None:
        with self._lock:
            give_back, self._give_back = self._give_back, None
        if give_back is not None:
            give_back()

    def __enter__(self) -> ModelClaim:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
