"""Prompts: their forms (text, token ids, chat messages), the checks that take
no tokenizing, and fitting a chat into the context by dropping its oldest
messages. Chat messages are checked once, into ``ChatMessages``; whoever
holds one (the HTTP dialects, ``Llm``) does not check them again."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..checks import invalid, is_int
from ..errors import MnnEngineError
from .sampling import is_valid_unicode
from .tokenizing import utf8_len

log = logging.getLogger("mnn_engine.llm")

Message = Mapping[str, Any]
Prompt = str | Sequence[int] | Sequence[Message]
#: Tokens kept free for the answer when truncating a chat without max_tokens
DEFAULT_ANSWER_RESERVE = 256


class PromptCancelled(Exception):
    """The generation was cancelled while its prompt was being tokenized."""


class ChatMessages(tuple):
    """Chat messages in the neutral form the chat template takes: a tuple of
    ``{"role": str, "content": str}`` (roles non-empty, text valid Unicode).
    Made only by ``chat_messages``, which checks them."""

    __slots__ = ()

    @property
    def pairs(self) -> list[tuple[str, str]]:
        return [(m["role"], m["content"]) for m in self]

    @property
    def text_bytes(self) -> int:
        return sum(utf8_len(m["content"]) for m in self)


def chat_messages(messages: Any) -> ChatMessages:
    """Check chat messages once (role a non-empty string, content a string or
    null, valid Unicode) into ``ChatMessages``; one that is already checked
    is returned as it is."""
    if isinstance(messages, ChatMessages):
        return messages
    if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence) or not messages:
        raise invalid("messages", "must be a non-empty list of {role, content} objects")
    out = []
    for i, message in enumerate(messages):
        if not isinstance(message, Mapping):
            raise invalid(f"messages[{i}]", "must be an object with role and content")
        role, content = message.get("role"), message.get("content")
        if not isinstance(role, str) or not role:
            raise invalid(f"messages[{i}].role", "must be a non-empty string")
        if content is None:
            content = ""
        if not isinstance(content, str):
            raise invalid(f"messages[{i}].content", "must be a string")
        for name, text in (("role", role), ("content", content)):
            if not is_valid_unicode(text):
                raise invalid(f"messages[{i}].{name}", "must be valid Unicode (no lone surrogates)")
        out.append({"role": role, "content": content})
    return ChatMessages(out)


def is_chat(prompt: Any) -> bool:
    """A prompt given as chat messages (rather than text or token ids)."""
    if isinstance(prompt, ChatMessages):
        return True
    return isinstance(prompt, Sequence) and not isinstance(prompt, (str, bytes, bytearray)) and \
        bool(prompt) and all(isinstance(m, Mapping) for m in prompt)


def checked_ids(token_ids: Sequence[int], vocab_size: int, param: str, hint: str = "") -> list[int]:
    """Token ids as a list, each an integer inside the vocabulary; ``hint``
    ends the message for an id outside it."""
    ids = list(token_ids)
    for token in ids:
        if not is_int(token):
            raise invalid(param, f"token ids must be integers (got {token!r})")
        if not 0 <= token < (vocab_size or 2**31):
            raise invalid(param, f"token id {token} is outside the vocabulary (size {vocab_size}){hint}")
    return ids


def checked_prompt(prompt: Prompt, *, enable_thinking: bool | None, tools: Any, vocab_size: int,
                   max_token_bytes: int, context_length: int) -> Prompt:
    """The checks on a prompt that take no tokenizing (milliseconds even for
    megabytes): its shape, and text too long to fit in the context whatever
    its tokens (``context_length_exceeded``). Chat messages come back as
    ``ChatMessages``."""
    if is_chat(prompt):
        prompt = chat_messages(prompt)
        size = prompt.text_bytes
    else:
        for name, value in (("enable_thinking", enable_thinking), ("tools", tools)):
            if value is not None:
                raise invalid(name, "applies to chat messages only (the prompt is text or token ids)")
        if isinstance(prompt, str):
            if not is_valid_unicode(prompt):
                raise invalid("prompt", "must be valid Unicode (no lone surrogates)")
            size = utf8_len(prompt)
        elif isinstance(prompt, Sequence) and not isinstance(prompt, (bytes, bytearray)):
            prompt = checked_ids(prompt, vocab_size, "prompt")
            if not prompt:
                raise MnnEngineError("empty_prompt", "the prompt is empty (no tokens)", param="prompt")
            size = len(prompt) * max_token_bytes
        else:
            raise invalid("prompt", "must be text, a list of token ids or a list of chat messages")
    if size > context_length * max_token_bytes:
        raise MnnEngineError(
            "context_length_exceeded",
            f"the prompt has {size} bytes of text; the context holds {context_length} tokens of at "
            f"most {max_token_bytes} bytes each", param="prompt")
    return prompt


def fit_chat(messages: ChatMessages, render: Callable[[list[Message]], str],
             tokens_within: Callable[[str, int], list[int] | None], context_length: int,
             reserve: int) -> tuple[str, list[int], int]:
    """The chat with as few of its oldest messages dropped as makes it fit
    (the system prompt stays; what is left starts with a user turn), with
    ``reserve`` tokens left for the answer: its text, ids and the number of
    messages dropped."""
    head = 0
    while head < len(messages) - 1 and messages[head]["role"] in ("system", "developer"):
        head += 1
    body = list(messages[head:])
    limit = context_length - 1 - min(max(reserve, 1), context_length // 2)

    def attempt(dropped: int) -> tuple[str, list[int], int] | None:
        kept = body[dropped:]
        while len(kept) > 1 and kept[0]["role"] != "user":
            kept = kept[1:]
        text = render(list(messages[:head]) + kept)
        ids = tokens_within(text, limit)
        return None if ids is None else (text, ids, len(body) - len(kept))

    whole = attempt(0)
    if whole is not None:
        return whole
    best = None
    low, high = 1, len(body) - 1  # the fewest dropped messages that fit, by bisection (fitting is monotone)
    while low <= high:
        middle = (low + high) // 2
        fitted = attempt(middle)
        if fitted is None:
            low = middle + 1
        else:
            best, high = fitted, middle - 1
    if best is None:
        raise MnnEngineError("context_length_exceeded",
                             f"even the last message does not fit in the context ({context_length} tokens, "
                             f"{context_length - 1 - limit} kept for the answer)", param="messages")
    log.info("dropped the %d oldest messages to fit the context", best[2])
    return best


def fitting_ids(ids: list[int] | None, context_length: int) -> list[int]:
    """A prompt's ids, refused when they cannot leave room for one answer token."""
    if ids is None:
        raise MnnEngineError("context_length_exceeded",
                             f"the prompt has more than {context_length - 1} tokens; the context holds "
                             f"{context_length}", param="prompt")
    if len(ids) >= context_length:
        raise MnnEngineError("context_length_exceeded",
                             f"the prompt has {len(ids)} tokens; the context holds {context_length}", param="prompt")
    if not ids:
        raise MnnEngineError("empty_prompt", "the prompt is empty (no tokens)", param="prompt")
    return ids
