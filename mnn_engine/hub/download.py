"""One file from a model's source onto disk: streamed in bounded memory,
resumed from the bytes already there, retried with backoff, and checked
against the source's hash before it is given its real name."""

from __future__ import annotations

import errno
import hashlib
import http.client
import os
import re
import threading
import urllib.error
import urllib.parse
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..errors import MnnEngineError
from .sources import DEFAULT_POLICY, WAYS_OUT, RemoteFile, Retry, UrlPolicy, open_url

CHUNK = 1 << 20
#: what a partial file is called, in the place the caller keeps partials
PART_SUFFIX = ".part"
RETRIES = 5
#: seconds before each retry (the last repeats)
BACKOFF_S = (0.5, 1.0, 2.0, 4.0, 8.0)
_DISK_ERRORS = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)

#: on_bytes(count) is told of every chunk written
ByteCallback = Callable[[int], None]


class _Hasher:
    """SHA-256, or git's blob SHA-1 (``blob <size>\\0`` then the bytes)."""

    def __init__(self, remote: RemoteFile) -> None:
        if remote.sha256:
            self.h, self.expected = hashlib.sha256(), remote.sha256
        else:
            self.h, self.expected = hashlib.sha1(f"blob {remote.size}\0".encode()), remote.git_sha1
        self.kind = "SHA-256" if remote.sha256 else "git SHA-1"

    def update(self, data: bytes) -> None:
        self.h.update(data)

    def matches(self) -> bool:
        return self.h.hexdigest() == self.expected


def _resume(part: Path, remote: RemoteFile) -> tuple[_Hasher, int]:
    """The hash of what an earlier attempt left in ``part``, and its length
    (a part longer than the file cannot be right: it is dropped)."""
    hasher = _Hasher(remote)
    if part.is_file() and part.stat().st_size > remote.size:
        part.unlink()
    if not part.is_file():
        return hasher, 0
    done = 0
    with open(part, "rb") as reader:
        while chunk := reader.read(CHUNK):
            hasher.update(chunk)
            done += len(chunk)
    return hasher, done


def download(remote: RemoteFile, dest: Path, part: Path, headers: dict[str, str], source: str, *,
             on_bytes: ByteCallback | None = None, backoff: tuple[float, ...] = BACKOFF_S,
             policy: UrlPolicy = DEFAULT_POLICY, stop: threading.Event | None = None) -> None:
    """Download ``remote`` to ``dest`` via ``part``, resuming what an earlier
    attempt left there. A finished, verified ``dest`` is kept as it is.
    ``part`` must be where no other file of the model can land (a repo may
    list both ``X`` and ``X.part``): the bytes renamed to ``dest`` are the
    ones whose hash was checked.

    Every request after the first counts as an attempt, a restart from zero
    too (a source that ignores ``Range`` and ends early made 107,795 requests
    for one file): at most ``RETRIES`` of them without progress, and at
    most ``RETRIES + 1`` times the file's size received in all. Bytes that
    fail their hash are fetched once more before the file fails."""
    if dest.is_file() and dest.stat().st_size == remote.size:
        return
    dest.parent.mkdir(parents=True, exist_ok=True)
    part.parent.mkdir(parents=True, exist_ok=True)
    retry = Retry(RETRIES, backoff, stop)
    for _ in range(2):  # one corrupt body (a flaky proxy) costs one more fetch, not a failed pull
        hasher = _fetch(remote, part, headers, source, on_bytes, policy, retry)
        if hasher.matches():
            os.replace(part, dest)
            return
        part.unlink(missing_ok=True)
    raise MnnEngineError("pull_corrupt", f"{remote.path}: its {hasher.kind} does not match the source's, "
                         "twice; the download was deleted", param="files")


def _fetch(remote: RemoteFile, part: Path, headers: dict[str, str], source: str, on_bytes: ByteCallback | None,
           policy: UrlPolicy, retry: Retry) -> _Hasher:
    """All of ``remote``'s bytes into ``part`` (from what it holds), and their hash."""
    hasher, have = _resume(part, remote)
    if on_bytes and have:
        on_bytes(have)
    attempt = 0
    budget = (RETRIES + 1) * max(remote.size, CHUNK)  # bytes received in all, restarts included
    while have < remote.size:
        try:
            got = _fetch_range(remote, part, have, hasher, headers, source, on_bytes, policy, retry)
            if got == 0:
                raise ConnectionError("the source sent no bytes")
            have += got
            budget -= got
            if budget < 0:
                raise MnnEngineError("pull_failed", f"{remote.path}: the source sent more than {RETRIES + 1} times "
                                     f"the file's {remote.size} bytes without completing it", param="files")
        except _Restart:
            part.unlink(missing_ok=True)
            hasher, have = _Hasher(remote), 0
            attempt += 1
            if attempt > RETRIES:
                raise MnnEngineError("pull_failed", f"{remote.path}: the source ignores byte ranges and ends the "
                                     f"file early ({RETRIES} restarts)", param="files") from None
        except (OSError, http.client.HTTPException, _Transient) as exc:
            if isinstance(exc, OSError) and exc.errno in _DISK_ERRORS:
                raise MnnEngineError("disk_full", f"{remote.path}: the disk is full ({os.strerror(exc.errno)}); "
                                     "free space and pull again: it resumes", param="files") from exc
            attempt += 1
            if attempt > RETRIES:
                host = urllib.parse.urlsplit(remote.url).netloc
                raise MnnEngineError("pull_failed", f"{remote.path}: {exc} from {host} (after {RETRIES} retries; "
                                     f"pull again to resume, or {WAYS_OUT})", param="files") from exc
            retry.wait(attempt - 1, None, remote.path)  # the same backoff as a 5xx's, ended by a stop
            hasher, have = _resume(part, remote)  # what the failed attempt wrote before it broke counts
    if not part.exists():  # an empty file
        part.touch()
    return hasher


_CONTENT_RANGE = re.compile(r"^\s*bytes\s+(\d+)-(\d+)/(\d+|\*)\s*$")


def _continues_at(response: Any, start: int) -> bool:
    """Whether an answer to ``Range: bytes=start-`` holds the file from
    ``start`` on: a 206 whose Content-Range starts there, or a 200 that says
    so too (ModelScope's endpoint has been seen answering so; the official
    client accepts it). A 206 from another offset would be appended in the
    wrong place, and a plain 200 is the whole file: both restart it."""
    found = _CONTENT_RANGE.match(response.headers.get("Content-Range") or "")
    if found is None:
        return False  # RFC 9110 14.4: a 206 to a single range carries Content-Range
    return response.status in (200, 206) and int(found.group(1)) == start


class _Restart(Exception):
    """The source ignored the range: start the file over."""


class _Transient(Exception):
    """A failure worth retrying (5xx, a dropped connection)."""


def _fetch_range(remote: RemoteFile, part: Path, start: int, hasher: _Hasher, headers: dict[str, str],
                 source: str, on_bytes: ByteCallback | None, policy: UrlPolicy, retry: Retry) -> int:
    extra = {"Range": f"bytes={start}-"} if start else {}
    try:  # 408, 429 and 5xx are tried again there, as Retry-After says
        response = open_url(remote.url, headers, what=remote.path, source=source, extra=extra, policy=policy,
                            retry=retry)
    except (TimeoutError, urllib.error.URLError) as exc:
        raise _Transient(str(getattr(exc, "reason", exc))) from exc
    with response:
        if start and not _continues_at(response, start):
            raise _Restart()
        written = 0
        with open(part, "ab" if start else "wb") as writer:
            while chunk := response.read1(CHUNK):  # what has arrived: a trickle still reaches on_bytes
                if start + written + len(chunk) > remote.size:
                    raise _Transient(f"the source sent more than {remote.size} bytes")
                writer.write(chunk)
                hasher.update(chunk)
                written += len(chunk)
                if on_bytes:
                    on_bytes(len(chunk))
            writer.flush()
            os.fsync(writer.fileno())
    return written
