"""``GET /events``: the engine's events (model, generation, server, pull) as
server-sent events, pushed as they happen; the chat page's live status."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from tornado.iostream import StreamClosedError

from .. import jsonutil
from .app import JsonHandler

#: a comment line this often keeps proxies from closing an idle stream
HEARTBEAT_S = 15.0


class EventsHandler(JsonHandler):
    async def get(self) -> None:
        self.start_events()
        self._gone = asyncio.Event()
        events = self.ctx.engine.events.stream()
        try:
            self.write(b": connected\n\n")
            await self.flush()
            while not self._gone.is_set() and not self.ctx.stopping:
                following = asyncio.ensure_future(anext(events))
                gone = asyncio.ensure_future(self._gone.wait())
                done, _ = await asyncio.wait({following, gone}, timeout=HEARTBEAT_S,
                                             return_when=asyncio.FIRST_COMPLETED)
                gone.cancel()
                if following not in done:
                    following.cancel()
                    with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration):
                        await following
                    if not self._gone.is_set():
                        self.write(b": heartbeat\n\n")
                        await self.flush()
                    continue
                event = following.result()
                self.write(b"data: " + jsonutil.dumps({"kind": event.kind, "state": event.state, "data": event.data,
                                                       "time": event.time, "seq": event.seq}) + b"\n\n")
                await self.flush()
        except StreamClosedError:
            pass
        finally:
            await events.aclose()
        if not self._gone.is_set():
            self.finish()

    def on_connection_close(self) -> None:
        gone = getattr(self, "_gone", None)
        if gone is not None:
            gone.set()


def routes(ctx: Any) -> list[tuple[str, type, dict[str, Any]]]:
    return [(r"/events", EventsHandler, {"ctx": ctx})]
