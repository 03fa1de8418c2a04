"""Compiling a grammar with llguidance, where a crash is least likely and
every error is found before a generation starts. Shared by the engine
(``structured``) and the sandbox's child (``grammar_sandbox``)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from ..checks import invalid
from ..errors import MnnEngineError

INSTALL_HINT = "structured output needs the grammar engine: pip install 'mnn-engine[structured]' (llguidance)"
#: Grammars are compiled on a thread with this stack. llguidance recurses over
#: the grammar while compiling: on an 8 MiB stack 30,000 required names
#: overflowed it (SIGSEGV), on a 1 MiB one (Android's thread default) 4,000
#: did; with 32 MiB, 60,000 names end in llguidance's own clean error (its
#: grammar holds at most 65,525 symbols). Only touched pages cost memory.
COMPILE_STACK_BYTES = 64 * 1024 * 1024
#: a grammar that forces more tokens than this before any choice never ends (see compile_matcher)
MAX_FORCED_TOKENS = 4096


def llguidance_module() -> Any:
    """llguidance, or ``structured_output_unavailable`` with the install line."""
    try:
        import llguidance
    except ImportError as exc:
        raise MnnEngineError("structured_output_unavailable", INSTALL_HINT, param="response_format") from exc
    return llguidance


def make_tokenizer(ll: Any, tokens: list[bytes], stops: list[int], tokenize: Callable[[bytes | str], list[int]]) -> Any:
    """llguidance's tokenizer for a vocabulary (token bytes by id, end tokens)."""
    vocab = _Vocabulary(tokens, stops, tokenize)
    return ll.LLTokenizer(ll.TokenizerWrapper(vocab), n_vocab=len(tokens), eos_token=stops or None)


class _Vocabulary:
    """What llguidance's TokenizerWrapper reads of a tokenizer."""

    def __init__(self, tokens: list[bytes], stops: list[int], tokenize: Callable[[bytes | str], list[int]]) -> None:
        self.tokens = tokens
        self.eos_token_id = stops[0] if stops else len(tokens) - 1
        self.stop_ids = stops
        self.bos_token_id = None
        self.special_token_ids = stops
        self._tokenize = tokenize

    def __call__(self, text: bytes | str) -> list[int]:
        return self._tokenize(text)


def _on_big_stack(work: Callable[[], Any], stack_bytes: int) -> Any:
    """``work()`` on a new thread with ``stack_bytes`` of stack."""
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["value"] = work()
        except BaseException as exc:  # re-raised in the caller's thread
            outcome["error"] = exc

    with _stack_lock:  # threading.stack_size is process-wide: set it only around our own thread's start
        previous = threading.stack_size(stack_bytes)
        try:
            thread = threading.Thread(target=run, name="mnn-engine-grammar-compile", daemon=True)
            thread.start()
        finally:
            threading.stack_size(previous)
    thread.join()
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


_stack_lock = threading.Lock()


def grammar_error_text(error: str) -> str:
    """llguidance's error without the parser state or backtrace it appends."""
    for dump in ("\n<state>", "\n<backtrace>"):
        error = error.split(dump, 1)[0]
    return error.strip()


def compile_matcher(tokenizer: Any, grammar: str, what: str,
                    stack_bytes: int = COMPILE_STACK_BYTES) -> tuple[Any, bytes]:
    """The grammar's matcher and its first token mask, computed on a big
    stack. Errors llguidance finds only when it computes a mask (``$ref``
    loops, say) are found here too, before any generation starts."""
    ll = llguidance_module()

    def work() -> tuple[Any, bytes]:
        # an unsupported grammar leaves the matcher in its error state (the constructor never raises)
        matcher = ll.LLMatcher(tokenizer, grammar)
        first = b""
        if not matcher.is_error():
            first = bytes(matcher.compute_bitmask())
        if not matcher.is_error():
            # The tokens the grammar forces from the start: a schema whose every instance is
            # infinite (a tool whose parameters are {"$ref": "#"}) forces tens of thousands, and
            # llguidance fails only later, mid-answer ("Too many items (limit 50000; ff_tokens)").
            probe = matcher.deep_copy()
            forced = probe.compute_ff_tokens()
            if probe.is_error():
                raise invalid(what, f"not supported: {grammar_error_text(probe.get_error())}")
            if len(forced) > MAX_FORCED_TOKENS:
                raise invalid(what, f"not supported: the grammar forces more than {MAX_FORCED_TOKENS} tokens in a "
                                    "row (a schema that refers to itself with no way to end, like {\"$ref\": \"#\"})")
        if matcher.is_error():
            raise invalid(what, f"not supported: {grammar_error_text(matcher.get_error())}")
        return matcher, first

    return _on_big_stack(work, stack_bytes)
