"""``GET /events``: the engine's events (model, generation, server, pull) as
server-sent events, pushed as they happen; the chat page's live status.

One ``EventFanout`` per server subscribes to the engine once and serialises
each event once; every subscriber has a bounded buffer of frames. One that
does not read (its buffer full) is dropped, so 200 stalled subscribers no
longer slow every request (they took a generation route from 203 to 20
requests per second). At most ``MAX_SUBSCRIBERS`` at once (``/events`` was
a way to hold connections forever: heartbeats keep them alive).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from tornado.iostream import StreamClosedError

from .. import jsonutil
from ..errors import MnnEngineError
from .app import JsonHandler

if TYPE_CHECKING:
    from ..engine.events import Event, EventStream

#: a comment line this often keeps proxies from closing an idle stream
HEARTBEAT_S = 15.0
#: subscribers at once (more get 503)
MAX_SUBSCRIBERS = 32
#: frames a subscriber may have waiting; one more and it is dropped
BUFFERED_FRAMES = 256


class EventFanout:
    """The engine's events as SSE frames, to every subscriber's queue."""

    def __init__(self, events: EventStream, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.subscribers: dict[asyncio.Queue[bytes], Callable[[], None]] = {}  # queue -> how to drop it
        self.dropped = 0
        self._unsubscribe = events.subscribe(self._publish)

    def _publish(self, event: Event) -> None:  # any thread
        frame = b"data: " + jsonutil.dumps({"kind": event.kind, "state": event.state, "data": event.data,
                                            "time": event.time, "seq": event.seq}) + b"\n\n"
        with contextlib.suppress(RuntimeError):  # the loop is closed
            self.loop.call_soon_threadsafe(self._deliver, frame)

    def _deliver(self, frame: bytes) -> None:
        for queue, drop in list(self.subscribers.items()):
            try:
                queue.put_nowait(frame)
            except asyncio.QueueFull:  # a subscriber that does not read: its connection is closed
                del self.subscribers[queue]
                self.dropped += 1
                drop()

    def subscribe(self, drop: Callable[[], None]) -> asyncio.Queue[bytes]:
        """A new subscriber's queue; ``drop()`` ends it if it falls behind."""
        if len(self.subscribers) >= MAX_SUBSCRIBERS:
            raise MnnEngineError("server_busy", f"{MAX_SUBSCRIBERS} clients already follow /events; try later")
        queue: asyncio.Queue[bytes] = asyncio.Queue(BUFFERED_FRAMES)
        self.subscribers[queue] = drop
        return queue

    def unsubscribe(self, queue: asyncio.Queue[bytes]) -> None:
        self.subscribers.pop(queue, None)

    def close(self) -> None:
        self._unsubscribe()


class EventsHandler(JsonHandler):
    async def get(self) -> None:
        fanout: EventFanout = self.ctx.events
        queue = fanout.subscribe(self.request.connection.close)
        self.start_events()
        self._gone = asyncio.Event()
        try:
            self.write(b": connected\n\n")
            await self.flush()
            while not self._gone.is_set() and not self.ctx.stopping:
                following = asyncio.ensure_future(queue.get())
                gone = asyncio.ensure_future(self._gone.wait())
                done, _ = await asyncio.wait({following, gone}, timeout=HEARTBEAT_S,
                                             return_when=asyncio.FIRST_COMPLETED)
                gone.cancel()
                if following not in done:
                    following.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await following
                    if not self._gone.is_set():
                        self.write(b": heartbeat\n\n")
                        await self.flush()
                    continue
                self.write(following.result())
                await self.flush()
        except StreamClosedError:
            pass
        finally:
            fanout.unsubscribe(queue)
        if not self._gone.is_set():
            self.finish()

    def on_connection_close(self) -> None:
        gone = getattr(self, "_gone", None)
        if gone is not None:
            gone.set()


def routes(ctx: Any) -> list[tuple[str, type, dict[str, Any]]]:
    return [(r"/events", EventsHandler, {"ctx": ctx})]
