"""The request queue (``serve --queue N``, 16 by default): the server runs
one generation at a time, whichever model it is on (two at once would each
run at half speed on a phone's cores, and hold two KV caches), and up to N
requests wait, first come first served, for the turn, each at most
``--queue-timeout`` seconds. A request's turn covers loading its model when
that is needed. With ``--queue 0`` a request that finds a generation running
gets 429 at once, except when that generation was cancelled (its client
left): it ends before its next token, so the request waits for it instead.
Within one model the rule is also the model's claim (``Llm.claim``). Runs on
the server's event loop; the engines' events, from their generation
threads, wake the next in line."""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..errors import MnnEngineError
from .settings import DEFAULT_QUEUE_TIMEOUT

if TYPE_CHECKING:
    from ..engine.events import Event
    from ..engine.protocol import ServedModels


class GenerationQueue:
    def __init__(self, models: ServedModels, limit: int = 0, timeout: float = DEFAULT_QUEUE_TIMEOUT,
                 on_timeout: Callable[[], Any] = lambda: None) -> None:
        # limit and timeout were checked by ServerSettings.validated
        self.models = models
        self.limit = limit
        self.timeout = float(timeout)
        self.waiters: collections.deque[asyncio.Future[None]] = collections.deque()
        #: each request's place in the line (or the turn it was given), until release(owner)
        self._places: dict[int, asyncio.Future[None]] = {}
        #: the request given the turn, until its generation starts (no one may slip in before it)
        self.holder: Any = None
        #: requests that keep their turn across several generations (``keep_turn``)
        self._keeping: set[int] = set()
        self.on_timeout = on_timeout
        self.loop = asyncio.get_running_loop()
        self._unsubscribe = models.events.subscribe(self._on_event)
        self.closed = False

    @property
    def depth(self) -> int:
        return len(self.waiters)

    def _on_event(self, event: Event) -> None:  # the generation thread
        if event.kind == "generation":
            self.loop.call_soon_threadsafe(self._on_generation, event.state)

    def keep_turn(self, owner: Any) -> None:
        """``owner`` runs several generations (a list of prompts; a prompt scored, then answered): once
        given the turn it keeps it across them, until ``release(owner)``; the others wait as for one
        long generation."""
        self._keeping.add(id(owner))

    def _holder_keeps(self) -> bool:
        return self.holder is not None and any(self._places.get(k) is self.holder for k in self._keeping)

    def _on_generation(self, state: str) -> None:
        if state == "running":
            if not self._holder_keeps():
                self.holder = None
        else:
            self._wake()

    def _wake(self) -> None:
        if self.closed or self.holder is not None or self.models.generating:
            return
        while self.waiters:
            waiter = self.waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                self.holder = waiter
                return

    async def turn(self, owner: Any) -> None:
        """Return when ``owner`` may start its generation: at once when the
        model is free and no one waits, else after those before it. ``busy``
        when the queue is off or full, or the wait passed the timeout."""
        if self.closed:
            raise MnnEngineError("server_stopping", "the server is stopping; no new requests")
        if self._holder_keeps() and self._places.get(id(owner)) is self.holder:
            return  # its next generation, in the turn it keeps
        if not self.waiters and self.holder is None and not self.models.generating:
            self.holder = self.loop.create_future()  # the turn is owner's until its generation starts
            self.holder.set_result(None)
            self._places[id(owner)] = self.holder
            return
        if self.limit == 0 and not self.models.generation_cancelled:
            raise MnnEngineError("busy", "a generation is already running (the server queues none: serve --queue)")
        if self.limit and len(self.waiters) >= self.limit:
            raise MnnEngineError("busy", f"the model is busy and {self.limit} requests are already waiting")
        waiter: asyncio.Future[None] = self.loop.create_future()
        self.waiters.append(waiter)
        self._places[id(owner)] = waiter  # release(owner) gives up its place or its turn
        try:
            await asyncio.wait_for(asyncio.shield(waiter), self.timeout)
        except asyncio.TimeoutError:
            self.on_timeout()
            self.release(owner)
            raise MnnEngineError("busy", f"waited {self.timeout:g} s in the queue; the model is still busy") \
                from None
        except asyncio.CancelledError:
            if self.closed:
                raise MnnEngineError("server_stopping", "the server stopped while the request waited") from None
            raise MnnEngineError("generation_cancelled", "the client left the queue") from None

    def release(self, owner: Any) -> None:
        """``owner`` is done with the queue (its response finished or its client
        left): its place in the line, or the turn it was given and did not use
        for a generation, goes to the next."""
        self._keeping.discard(id(owner))
        waiter = self._places.pop(id(owner), None)
        if waiter is not None and not waiter.done():
            waiter.cancel()
        if waiter is not None and waiter in self.waiters:
            self.waiters.remove(waiter)
        if waiter is not None and self.holder is waiter:
            self.holder = None
            self._wake()

    def close(self) -> None:
        """The server stops: every waiting request is answered 503."""
        self.closed = True
        self._unsubscribe()
        for waiter in self.waiters:
            if not waiter.done():
                waiter.cancel()
        self.waiters.clear()
