"""Tokenising untrusted text in bounded time.

MNN's BPE merges each pre-token in time quadratic in its length: 8,000 'a'
take 1.8 s, 4,000 emoji 7 s, and a 40 KB run froze the server for 14 s. Text is
therefore handed to MNN in segments:

- cut before a space that starts a word (``" word"``): every regex
  pre-tokenizer of the byte-level BPE family (GPT-2, Qwen, Llama 3) starts a
  pre-token there, so these cuts change nothing. Whether they are exact for the
  loaded tokenizer is checked once at load (``splits_exactly``); when they are
  not, the text goes to MNN whole and ``check_cost`` refuses what would take
  too long;
- inside a run longer than ``MAX_RUN_CHARS`` with no such space, cut after a
  run of letters (the pre-tokenizers end a pre-token there too) and, failing
  that, at ``MAX_RUN_CHARS``: only such pathological runs (hundreds of
  characters of one letter or symbol with no break) may then get a different,
  still valid, tokenization of the same text.

Segments are tokenised one at a time, so the work stops as soon as the tokens
exceed the context and a cancel is honoured between segments.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator

from ..errors import MnnEngineError

#: Longest piece (in characters) handed to MNN when no exact cut is found:
#: at most 1 KiB, a few milliseconds of MNN's BPE.
MAX_RUN_CHARS = 256
#: Segments are gathered up to this many characters per MNN call.
BATCH_CHARS = 4096
#: Worst-case quadratic work admitted when the text cannot be segmented:
#: the sum of squared run lengths (bytes); about one second of MNN's BPE here.
MAX_UNSEGMENTED_COST = 36_000_000

_WORD_START = re.compile(r"(?= \S)")
_RUNS = re.compile(r"\S{64,}")
_PROBE = ('Hello, world! \u4f60\u597d\uff0c\u4e16\u754c\u3002 "quoted" x=42\n\n'
          '  indented  twice <think> a-b_c 3.14 \u00e9migr\u00e9')


def utf8_len(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def _word_pieces(text: str) -> Iterator[str]:
    """``text`` cut before every space that starts a word."""
    start = 0
    for match in _WORD_START.finditer(text):
        if match.start() > start:
            yield text[start:match.start()]
            start = match.start()
    yield text[start:]


def _cut_long(run: str) -> Iterator[str]:
    """Pieces of at most MAX_RUN_CHARS, cut after a run of letters where the
    second half of the window has such a place (not inside a <tag>)."""
    start = 0
    while len(run) - start > MAX_RUN_CHARS:
        end = start + MAX_RUN_CHARS
        for i in range(end, start + MAX_RUN_CHARS // 2, -1):
            if run[i - 1].isalpha() and not run[i].isalpha() and "<" not in run[max(start, i - 64):i]:
                end = i
                break
        yield run[start:end]
        start = end
    yield run[start:]


def segments(text: str) -> Iterator[str]:
    """``text`` as consecutive segments for separate MNN calls (lazily):
    words gathered up to ``BATCH_CHARS``, and each piece of a cut long run
    on its own."""
    batch: list[str] = []
    size = 0
    for word in _word_pieces(text):
        if batch and (size + len(word) > BATCH_CHARS or len(word) > MAX_RUN_CHARS):
            yield "".join(batch)
            batch, size = [], 0
        if len(word) > MAX_RUN_CHARS:
            yield from _cut_long(word)
            continue
        batch.append(word)
        size += len(word)
    if batch:
        yield "".join(batch)


def splits_exactly(tokenize: Callable[[str], list[int]]) -> bool:
    """Whether cutting before word-start spaces leaves this tokenizer's output unchanged."""
    pieces = re.split(r"(?= \S)", _PROBE)
    return [t for p in pieces for t in tokenize(p)] == tokenize(_PROBE)


def check_cost(text: str) -> None:
    """Refuse text whose whitespace-free runs would keep MNN's tokenizer busy
    for more than about a second (used when segmenting is not exact)."""
    cost = sum(utf8_len(m.group()) ** 2 for m in _RUNS.finditer(text))
    if cost > MAX_UNSEGMENTED_COST:
        raise MnnEngineError(
            "invalid_argument",
            "the prompt has runs of text without spaces too long for this model's tokenizer "
            f"(at most about {int(MAX_UNSEGMENTED_COST ** 0.5)} bytes in one run)",
            param="prompt")


def tokenize_bounded(tokenize: Callable[[str], list[int]], text: str, *, limit: int, exact_cuts: bool,
                     cancelled: Callable[[], bool] = lambda: False) -> list[int] | None:
    """Token ids of ``text``, or None as soon as there are more than ``limit``
    (or a cancel was seen between segments)."""
    if not exact_cuts:
        check_cost(text)
        ids = tokenize(text)
        return ids if len(ids) <= limit else None
    ids: list[int] = []
    for segment in segments(text):
        if cancelled():
            return None
        ids.extend(tokenize(segment))
        if len(ids) > limit:
            return None
    return ids
