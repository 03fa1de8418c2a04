"""The HTTP server below the handlers: which connections it keeps, and what
it answers when Tornado refuses a request before any handler runs.

Connections. The server holds at most ``limit`` at once (the file-descriptor
budget). 400 slowloris connections or 260 idle subscribers once took all of
them and every later client got a reset; then 64 request bodies that stalled
after their headers did the same (a connection reading its body counted as
busy and all loopback clients share one address). Now each connection is in
one of three states:

- *idle*: between requests, or still sending its headers (a slowloris looks
  exactly like that);
- *receiving*: its headers arrived and its body is being read;
- *handling*: its body is complete and its answer is being written (a
  streamed chat, an ``/events`` subscriber), until the answer's last byte.

A new connection that finds the server (or its client's share,
``per_client``) full closes the oldest idle connection, else the receiving
one whose body is slowest, provided it is below ``MIN_BODY_BYTES_PER_S``
(after ``EVICT_GRACE_S``); only handling connections are never taken. A
body that trickles below that rate is dropped anyway once ``BODY_GRACE_S``
is over (a sweep every second), whether or not anyone needs the place (a
stalled body used to hold its slot for Tornado's whole ``BODY_TIMEOUT_S``).
Headers must arrive within ``HEADER_TIMEOUT_S``. ``/events`` subscribers
have their own cap (``server.events``). So ``/health`` and a generation
request always find a place.

Malformed requests. Tornado answers a request it cannot parse (bad
``Content-Length``, bad chunked framing, a chunked body over its limit) with
the fixed bytes ``HTTP/1.1 400 Bad Request\\r\\n\\r\\n`` from inside
``HTTP1Connection``, which has no hook for it. ``handle_stream`` (the public
override point of ``TCPServer``) wraps each connection's stream so that
exactly those bytes are replaced with a JSON error in OpenAI's shape, its
message taken from the error Tornado logged a moment before (redacted: see
below). Headers over ``MAX_HEADER_BYTES`` cannot be answered at all:
Tornado's ``IOStream`` closes the connection itself when the limit is passed,
before any code here runs (``tests/server/test_hardening.py`` pins that the client
sees the connection closed).

Logs. Tornado logs a malformed request's error, which quotes the offending
header's value: ``Authorization: Bearer KEY\\x00`` put the API key in the
log. A filter on Tornado's loggers replaces every quoted value in those
messages; no log line carries a header value.
"""

from __future__ import annotations

import contextvars
import logging
import re
import secrets
import time
from typing import Any

from tornado.httpserver import HTTPServer
from tornado.httputil import HTTPMessageDelegate
from tornado.ioloop import PeriodicCallback
from tornado.iostream import IOStream

from .. import jsonutil
from ..errors import ERROR_CODES

#: Tornado's one timeout for headers, and for an idle keep-alive connection's next request
HEADER_TIMEOUT_S = 20.0
BODY_TIMEOUT_S = 120.0
#: a body slower than this on average, once its grace is over, is dropped: 8 MiB (the default body
#: limit) would need 512 s at this rate, four times what Tornado's body timeout allows a body anyway
MIN_BODY_BYTES_PER_S = 16 * 1024
#: a body's first seconds, after which the sweep drops it below that rate (a client may send its
#: headers and body apart, and a body's first bytes may wait on the client's own work)
BODY_GRACE_S = 2.0
#: when a place is needed, a body below the rate may be closed this soon (an attacker's stalled
#: bodies are replaced faster than the sweep's grace; a real body follows its headers within it)
EVICT_GRACE_S = 0.1
SWEEP_INTERVAL_S = 1.0
MAX_HEADER_BYTES = 64 * 1024
#: what Tornado writes for a request it could not parse
_BARE_400 = b"HTTP/1.1 400 Bad Request\r\n\r\n"
#: quoted values in Tornado's messages ('...' or "..."), replaced before a message is logged
_QUOTED = re.compile(r"""(?:b?'(?:[^'\\]|\\.)*'|b?"(?:[^"\\]|\\.)*")""")
#: the last malformed-request error, in the task that is about to answer it
_last_error: contextvars.ContextVar[str] = contextvars.ContextVar("mnn_engine_malformed", default="")


def redact(message: str) -> str:
    """A log message with every quoted value replaced."""
    return _QUOTED.sub("'…'", message)


class RedactHeaderValues(logging.Filter):
    """On Tornado's loggers: messages keep their words, lose their quoted
    values. A malformed request's message is also kept for its JSON answer
    and demoted to DEBUG (a client's mistake, not the server's)."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a malformed record: keep only its format
            message = str(record.msg)
        cleaned = redact(message)
        if message.startswith("Malformed HTTP message"):
            _last_error.set(cleaned.split(": ", 2)[-1])
            record.levelno, record.levelname = logging.DEBUG, "DEBUG"
        if cleaned != message or record.args:
            record.msg, record.args = cleaned, ()
        return True


_filter = RedactHeaderValues()


def install_log_filter() -> None:
    """Idempotent: Tornado's loggers never log a header value. tornado.general
    is opened to INFO (where it reports malformed requests) so the filter
    sees those records; they leave it as DEBUG."""
    for name in ("tornado.general", "tornado.access", "tornado.application"):
        logger = logging.getLogger(name)
        if _filter not in logger.filters:
            logger.addFilter(_filter)
    general = logging.getLogger("tornado.general")
    if general.getEffectiveLevel() > logging.INFO:
        general.setLevel(logging.INFO)


def _json_error(status: int, code: str, message: str) -> bytes:
    body = jsonutil.dumps({"error": {"message": message, "type": ERROR_CODES[code].openai_type, "param": None,
                                     "code": code}})
    reason = {400: "Bad Request", 413: "Payload Too Large"}[status]
    # a request too malformed for a handler still gets a request ID (none of the client's: unparsed)
    return (f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n"
            f"X-Request-Id: req_{secrets.token_hex(12)}\r\nConnection: close\r\n\r\n").encode() + body


class _Connection:
    """One connection's state: ``idle``, ``receiving`` (a body) or ``handling`` (an answer)."""

    __slots__ = ("address", "body_bytes", "body_started", "since", "state", "stream")

    def __init__(self, stream: IOStream, address: Any) -> None:
        self.stream, self.address, self.since, self.state = stream, address, time.monotonic(), "idle"
        self.body_bytes, self.body_started = 0, 0.0  # of the request being read

    def body_rate(self, now: float) -> float:
        """The body's mean rate so far, in bytes/s."""
        return self.body_bytes / max(now - self.body_started, 1e-3)

    def is_slow(self, now: float, grace: float) -> bool:
        """Reading a body, for at least ``grace`` seconds, below the minimum rate."""
        return (self.state == "receiving" and now - self.body_started >= grace
                and self.body_rate(now) < MIN_BODY_BYTES_PER_S)


class _Tracked(HTTPMessageDelegate):
    """A request's delegate, moving its connection through receiving and handling to idle."""

    def __init__(self, inner: HTTPMessageDelegate, connection: _Connection | None, request_conn: Any) -> None:
        self.inner, self.connection = inner, connection
        if connection is not None and hasattr(request_conn, "finish"):
            finish = request_conn.finish

            def finished(*args: Any, **kwargs: Any) -> Any:  # the answer's last byte is queued
                self._idle()
                return finish(*args, **kwargs)

            request_conn.finish = finished

    def headers_received(self, start_line: Any, headers: Any) -> Any:
        if self.connection is not None:
            self.connection.state, self.connection.body_bytes = "receiving", 0
            self.connection.body_started = time.monotonic()
        return self.inner.headers_received(start_line, headers)

    def data_received(self, chunk: bytes) -> Any:
        if self.connection is not None:
            self.connection.body_bytes += len(chunk)
        return self.inner.data_received(chunk)

    def finish(self) -> None:
        if self.connection is not None and self.connection.state == "receiving":
            self.connection.state = "handling"
        self.inner.finish()

    def on_connection_close(self) -> None:
        self._idle()
        self.inner.on_connection_close()

    def _idle(self) -> None:
        if self.connection is not None:
            self.connection.state = "idle"
            self.connection.since = time.monotonic()


class ApiHTTPServer(HTTPServer):
    """Tornado's HTTPServer with the connection policy and JSON answers above."""

    # Tornado's HTTPServer is configured through initialize() (a Configurable), not __init__
    def initialize(self, app: Any, *, limit: int = 256, per_client: int = 64,  # type: ignore[override]
                   body_limit: int = 8 << 20, **kwargs: Any) -> None:
        """``body_limit``: the API's own body limit (Tornado's is twice it, so ours answers first)."""
        super().initialize(app, idle_connection_timeout=HEADER_TIMEOUT_S, body_timeout=BODY_TIMEOUT_S,
                           max_header_size=MAX_HEADER_BYTES, max_body_size=2 * body_limit + 1, **kwargs)
        self.body_limit = body_limit
        install_log_filter()
        self.limit, self.per_client = limit, per_client
        self.connections: dict[int, _Connection] = {}
        self.evicted = self.slow_bodies_dropped = 0
        self._sweeper: PeriodicCallback | None = None

    # ------------------------------------------------------------ admission
    def admit(self, address: Any) -> bool:
        """Make room for a new connection from ``address`` (closing an idle one, else
        the slowest body below the minimum rate); False: none can go, refuse it."""
        self._forget_closed()
        self._start_sweeping()
        mine = [c for c in self.connections.values() if _host(c.address) == _host(address)]
        if len(mine) >= self.per_client and not self._evict(mine):
            return False
        return len(self.connections) < self.limit or self._evict(list(self.connections.values()))

    def _evict(self, among: list[_Connection]) -> bool:
        now = time.monotonic()
        idle = [c for c in among if c.state == "idle" and not c.stream.closed()]
        slow = [c for c in among if c.is_slow(now, EVICT_GRACE_S) and not c.stream.closed()]
        if idle:
            victim = min(idle, key=lambda c: c.since)
        elif slow:
            victim = min(slow, key=lambda c: c.body_rate(now))
        else:
            return False
        self._close(victim)
        self.evicted += 1
        return True

    def _close(self, connection: _Connection) -> None:
        connection.stream.close()
        self.connections.pop(id(connection.stream), None)

    def sweep(self) -> None:
        """Drop every body slower than the minimum rate past its grace."""
        now = time.monotonic()
        for connection in [c for c in self.connections.values() if c.is_slow(now, BODY_GRACE_S)]:
            self.slow_bodies_dropped += 1
            self._close(connection)

    def _start_sweeping(self) -> None:
        if self._sweeper is None:  # started on the IOLoop that accepts, with the first connection
            self._sweeper = PeriodicCallback(self.sweep, 1000 * SWEEP_INTERVAL_S)
            self._sweeper.start()

    def _forget_closed(self) -> None:
        for key in [k for k, c in self.connections.items() if c.stream.closed()]:
            del self.connections[key]

    def stop_sweeping(self) -> None:
        """Stop the sweep (the server is closing)."""
        if self._sweeper is not None:
            self._sweeper.stop()
            self._sweeper = None

    @property
    def open_connections(self) -> int:
        self._forget_closed()
        return len(self.connections)

    # ------------------------------------------------------------ tornado's hooks
    def handle_stream(self, stream: IOStream, address: Any) -> None:
        connection = self.connections[id(stream)] = _Connection(stream, address)
        write = stream.write

        def write_json_errors(data: Any) -> Any:
            if bytes(data) == _BARE_400:
                reason = _last_error.get() or "the request could not be parsed"
                too_large = connection.body_bytes > self.body_limit
                data = _json_error(413 if too_large else 400, "payload_too_large" if too_large else "invalid_argument",
                                   f"malformed HTTP request: {reason}")
            return write(data)

        stream.write = write_json_errors  # type: ignore[method-assign]
        super().handle_stream(stream, address)

    def start_request(self, server_conn: object, request_conn: Any) -> HTTPMessageDelegate:
        inner = super().start_request(server_conn, request_conn)
        stream = getattr(server_conn, "stream", None)
        return _Tracked(inner, self.connections.get(id(stream)), request_conn)


def _host(address: Any) -> Any:
    return address[0] if isinstance(address, tuple) else address

