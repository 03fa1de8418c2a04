"""A bounded pool of daemon threads.

``concurrent.futures.ThreadPoolExecutor`` joins its threads at interpreter
exit (and asyncio's default executor at ``asyncio.run``'s end), so one worker
stuck in a network read — a host that trickles a byte a second — kept the
server alive for 40 s after SIGTERM. Work here runs on daemon threads that
nobody waits for at exit; what they do is made to stop by its own means (a
pull checks its stop event at every chunk it reads).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar

T = TypeVar("T")


class DaemonPool:
    """At most ``workers`` calls at once, the rest wait in order; threads are
    started on demand and end when idle."""

    def __init__(self, name: str, workers: int) -> None:
        self.name = name
        self.workers = max(1, workers)
        self._jobs: queue.SimpleQueue[tuple[Future[Any], Callable[..., Any], tuple[Any, ...]] | None] = \
            queue.SimpleQueue()
        self._lock = threading.Lock()
        self._running = 0
        self._idle = 0

    def submit(self, fn: Callable[..., T], *args: Any) -> Future[T]:
        future: Future[T] = Future()
        self._jobs.put((future, fn, args))
        with self._lock:
            if self._idle == 0 and self._running < self.workers:
                self._running += 1
                threading.Thread(target=self._work, name=f"{self.name}-{self._running}", daemon=True).start()
        return future

    def _work(self) -> None:
        while True:
            with self._lock:
                self._idle += 1
            try:
                job = self._jobs.get(timeout=5.0)
            except queue.Empty:
                job = None
            with self._lock:
                self._idle -= 1
                if job is None:
                    if not self._jobs.empty():  # submitted while this thread timed out: it takes it
                        continue
                    self._running -= 1
                    return
            future, fn, args = job
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(fn(*args))
            except BaseException as exc:  # given to whoever waits on the future
                future.set_exception(exc)
