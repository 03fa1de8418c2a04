"""Pieces of text from a generation thread to a consumer, sync or asyncio.

``start(put)`` begins a generation that calls ``put(piece)`` on its own
thread and returns a ``concurrent.futures.Future`` of the result. The
consumer iterates the pieces; when it stops early (``break``, ``close()``,
Ctrl-C, task cancellation) the generation is cancelled and waited for, so the
model is free again when the iterator is gone. Errors of the generation are
raised after the last piece.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
from collections.abc import AsyncIterator, Callable, Generator
from concurrent.futures import Future
from typing import Any, TypeVar

T = TypeVar("T")
Put = Callable[[str], None]
_DONE = object()


def stream_pieces(start: Callable[[Put], Future[T]], cancel: Callable[[], None]) -> Generator[str, None, T]:
    """Yield the pieces in the caller's thread; returns the generation's result."""
    pieces: queue.SimpleQueue[Any] = queue.SimpleQueue()
    future = start(pieces.put)
    future.add_done_callback(lambda _: pieces.put(_DONE))
    try:
        while (item := pieces.get()) is not _DONE:
            yield item
    finally:
        if not future.done():
            cancel()
            with contextlib.suppress(BaseException):
                future.result()
    return future.result()


async def astream_pieces(start: Callable[[Put], Future[Any]], cancel: Callable[[], None]) -> AsyncIterator[str]:
    """Yield the pieces on the running event loop, which never waits on the generation."""
    loop = asyncio.get_running_loop()
    pieces: asyncio.Queue[Any] = asyncio.Queue()

    def put(piece: Any) -> None:  # called on the generation thread
        with contextlib.suppress(RuntimeError):  # the loop is already closed
            loop.call_soon_threadsafe(pieces.put_nowait, piece)

    future = start(put)
    future.add_done_callback(lambda _: put(_DONE))
    try:
        while (item := await pieces.get()) is not _DONE:
            yield item
    finally:
        if not future.done():
            cancel()
            await asyncio.wait({asyncio.wrap_future(future)})
    future.result()
