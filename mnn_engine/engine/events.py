"""Streams of engine events and log entries, for callbacks and asyncio."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class Event:
    """Something changed: ``kind`` is ``model``, ``generation`` or ``server``;
    ``state`` the new state; ``data`` details (model ID, finish reason, ...)."""

    kind: str
    state: str
    data: dict[str, Any] = field(default_factory=dict)
    time: float = field(default_factory=time.time)
    seq: int = 0


@dataclass(frozen=True)
class LogEntry:
    """One log record: level name, tag (the logger's name) and message."""

    level: str
    tag: str
    message: str
    time: float


class Broadcast(Generic[T]):
    """Fan-out of items to plain callbacks and to ``async for`` consumers.

    Callbacks run in the thread that publishes; an exception in one is logged
    and does not reach the publisher. Async consumers get items through their
    own event loop (thread-safe).
    """

    def __init__(self, name: str) -> None:
        self._name = name
        self._lock = threading.Lock()
        self._callbacks: dict[int, Callable[[T], Any]] = {}
        self._ids = itertools.count()

    def subscribe(self, callback: Callable[[T], Any]) -> Callable[[], None]:
        """Call ``callback(item)`` for every item; returns the unsubscribe function."""
        key = next(self._ids)
        with self._lock:
            self._callbacks[key] = callback

        def unsubscribe() -> None:
            with self._lock:
                self._callbacks.pop(key, None)

        return unsubscribe

    def publish(self, item: T) -> None:
        with self._lock:
            callbacks = list(self._callbacks.values())
        for callback in callbacks:
            try:
                callback(item)
            except Exception:  # a subscriber's bug must not break the engine
                logging.getLogger("mnn_engine.state").debug("%s subscriber failed", self._name, exc_info=True)

    async def stream(self) -> AsyncIterator[T]:
        """``async for item in broadcast.stream()``: items from now on."""
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[T] = asyncio.Queue()

        def forward(item: T) -> None:
            with contextlib.suppress(RuntimeError):  # loop closed
                loop.call_soon_threadsafe(queue.put_nowait, item)

        unsubscribe = self.subscribe(forward)
        try:
            while True:
                yield await queue.get()
        finally:
            unsubscribe()


class EventStream(Broadcast[Event]):
    """Engine events, numbered in publishing order."""

    def __init__(self) -> None:
        super().__init__("events")
        self._seq = itertools.count(1)
        self._seq_lock = threading.RLock()  # publishing in order; callbacks may emit

    def emit(self, kind: str, state: str, **data: Any) -> Event:
        with self._seq_lock:
            event = Event(kind, state, data, seq=next(self._seq))
            self.publish(event)
        return event


class LogBuffer(Broadcast[LogEntry]):
    """The last ``capacity`` records of the ``mnn_engine`` loggers (including
    MNN's captured native output), plus live subscriptions."""

    def __init__(self, capacity: int = 1000, logger: str = "mnn_engine") -> None:
        super().__init__("logs")
        self._entries: deque[LogEntry] = deque(maxlen=capacity)
        self._handler = _BufferHandler(self)
        self._logger = logging.getLogger(logger)
        if self._logger.level == logging.NOTSET:
            self._logger.setLevel(logging.INFO)
        self._logger.addHandler(self._handler)

    def entries(self, min_level: int = logging.NOTSET) -> list[LogEntry]:
        return [e for e in list(self._entries) if logging.getLevelName(e.level) >= min_level]

    def add(self, entry: LogEntry) -> None:
        self._entries.append(entry)
        self.publish(entry)

    def close(self) -> None:
        self._logger.removeHandler(self._handler)


class _BufferHandler(logging.Handler):
    def __init__(self, buffer: LogBuffer) -> None:
        super().__init__(logging.DEBUG)
        self._buffer = buffer

    def emit(self, record: logging.LogRecord) -> None:
        try:
            message = record.getMessage()
        except Exception:  # a malformed record must not break logging
            message = str(record.msg)
        self._buffer.add(LogEntry(record.levelname, record.name, message, record.created))
