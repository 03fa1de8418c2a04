"""MNN's media tags, and the one rule that keeps them from reading local files.

MNN's tokenizer for multimodal models (``Omni::tokenizer_encode``) opens the
file that an ``<img>PATH</img>`` or ``<audio>PATH</audio>`` tag in the text
names — any path, a FIFO included. So text reaches MNN's tokenizer only
through ``guard()`` (``Llm``'s one tokenizer entry point calls it), which
breaks up every media tag except those naming a file registered here: the
server's own decoded images (``register``, for the request's lifetime), or a
file a Python caller names with ``trusted(path)``. A broken-up tag is the
same text with a word joiner after its ``<``: the model still sees the
characters, MNN no longer sees a tag.
"""

from __future__ import annotations

import contextlib
import os
import re
import threading
from collections import Counter
from collections.abc import Iterator

from ..checks import invalid
from .image_decode import check_image
from .media_header import MediaRefused, read_wav_header

WORD_JOINER = "\u2060"
#: what is read of a media file to check its header (a JPEG's frame header may follow large metadata;
#: a WAV's data chunk may follow others)
MAX_HEADER_BYTES = 4 * 1024 * 1024
#: the largest image file decoded (16 megapixels as an uncompressed 24-bit BMP: 48 MiB)
MAX_IMAGE_BYTES = 64 * 1024 * 1024
#: any opening or closing tag MNN treats specially inside text
_ANY_TAG = re.compile(r"</?(?:img|audio|video|hw)>", re.IGNORECASE)
#: the tags that name a file
KINDS = ("img", "audio", "video")

_lock = threading.Lock()
_registered: Counter[tuple[str, str]] = Counter()  # (kind, path)


def neutralize(text: str) -> str:
    """``text`` with every media tag broken up (none is honoured)."""
    if "<" not in text:
        return text
    return _ANY_TAG.sub(lambda m: m.group(0)[0] + WORD_JOINER + m.group(0)[1:], text)


def guard(text: str) -> str:
    """What MNN's tokenizer may see of ``text``: media tags that name a
    registered file are kept, every other one is broken up."""
    if "<" not in text:
        return text
    kept = _registered_tags()
    if kept is None:
        return neutralize(text)
    out, start = [], 0
    for match in kept.finditer(text):
        out.append(neutralize(text[start:match.start()]))
        out.append(match.group(0))
        start = match.end()
    out.append(neutralize(text[start:]))
    return "".join(out)


def _registered_tags() -> re.Pattern[str] | None:
    """A pattern of the exact tags of the registered files (None: none is registered)."""
    with _lock:
        tags = [tag(kind, path) for (kind, path), count in _registered.items() if count > 0]
    if not tags:
        return None
    return re.compile("|".join(re.escape(t) for t in tags))


def has_media(text: str) -> bool:
    """Whether guarded text holds a media tag MNN will read."""
    kept = _registered_tags() if "<" in text else None
    return kept is not None and kept.search(text) is not None


def tagged_files(text: str) -> list[tuple[str, str]]:
    """The (kind, path) of each registered file that guarded ``text`` names, in order."""
    kept = _registered_tags() if "<" in text else None
    if kept is None:
        return []
    found = []
    for match in kept.finditer(text):
        kind = match.group(0)[1:match.group(0).index(">")]
        found.append((kind, match.group(0)[len(kind) + 2:-(len(kind) + 3)]))
    return found


def check_files(text: str) -> None:
    """Refuse a registered image or sound that MNN's decoders should not be
    given (``media_header``: a format they do not read, too many pixels or
    seconds, truncated; an image is decoded in full, ``image_decode``): MNN
    would skip it silently, decode a bomb, or loop on it."""
    for kind, path in tagged_files(text):
        try:
            with open(path, "rb") as media_file:
                data = media_file.read(MAX_IMAGE_BYTES + 1 if kind == "img" else MAX_HEADER_BYTES)
            if kind == "img":
                if len(data) > MAX_IMAGE_BYTES:
                    raise MediaRefused(f"the image file is larger than {MAX_IMAGE_BYTES >> 20} MiB")
                check_image(data)
            elif kind == "audio":
                read_wav_header(data, complete=len(data) < MAX_HEADER_BYTES)
        except (OSError, MediaRefused) as exc:
            raise invalid("image" if kind == "img" else kind, f"{path}: {exc}") from exc


def tag(kind: str, path: str) -> str:
    """The tag for a registered file (``kind``: img, audio or video)."""
    return f"<{kind}>{path}</{kind}>"


def register(path: str | os.PathLike[str], kind: str = "img") -> None:
    """Allow ``<kind>PATH</kind>`` until ``unregister``; counted, so two users of one file are fine."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}")
    with _lock:
        _registered[(kind, os.fspath(path))] += 1


def unregister(path: str | os.PathLike[str], kind: str = "img") -> None:
    with _lock:
        key = (kind, os.fspath(path))
        _registered[key] -= 1
        if _registered[key] <= 0:
            del _registered[key]


@contextlib.contextmanager
def trusted(*paths: str | os.PathLike[str], kind: str = "img") -> Iterator[None]:
    """Within the block, ``<img>PATH</img>`` tags (``kind="audio"``:
    ``<audio>``) naming these files reach MNN as tags: the Python API's way
    to give a multimodal model a file, ``with media.trusted(p):
    llm.generate(f"<img>{p}</img>What is this?")``."""
    for path in paths:
        register(path, kind)
    try:
        yield
    finally:
        for path in paths:
            unregister(path, kind)
