"""The HTTP server below the handlers: which connections it keeps, and what
it answers when Tornado refuses a request before any handler runs.

Connections. The server holds at most ``limit`` at once (the file-descriptor
budget). 400 slowloris connections or 260 idle subscribers once took all of
them and every later client got a reset. Now each connection is known to be
*busy* (a request is being handled) or *idle* (between requests, or still
sending its headers — a slowloris looks exactly like that), and a new
connection that finds the server full closes the oldest idle one instead of
being refused; one client address may hold at most ``per_client`` of them
(its own oldest idle one goes first). Headers must arrive within
``HEADER_TIMEOUT_S`` and a body within ``BODY_TIMEOUT_S``. ``/events``
subscribers have their own cap (``server.events``). So ``/health`` and a
generation request always find a place.

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
from tornado.iostream import IOStream

from .. import jsonutil
from ..errors import ERROR_CODES

#: Tornado's one timeout for headers, and for an idle keep-alive connection's next request
HEADER_TIMEOUT_S = 20.0
BODY_TIMEOUT_S = 120.0
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
    __slots__ = ("address", "body_bytes", "busy", "since", "stream")

    def __init__(self, stream: IOStream, address: Any) -> None:
        self.stream, self.address, self.since, self.busy = stream, address, time.monotonic(), False
        self.body_bytes = 0  # of the request being read


class _Tracked(HTTPMessageDelegate):
    """A request's delegate, marking its connection busy from its headers to its end."""

    def __init__(self, inner: HTTPMessageDelegate, connection: _Connection | None) -> None:
        self.inner, self.connection = inner, connection

    def headers_received(self, start_line: Any, headers: Any) -> Any:
        if self.connection is not None:
            self.connection.busy, self.connection.body_bytes = True, 0
        return self.inner.headers_received(start_line, headers)

    def data_received(self, chunk: bytes) -> Any:
        if self.connection is not None:
            self.connection.body_bytes += len(chunk)
        return self.inner.data_received(chunk)

    def finish(self) -> None:
        self._idle()
        self.inner.finish()

    def on_connection_close(self) -> None:
        self._idle()
        self.inner.on_connection_close()

    def _idle(self) -> None:
        if self.connection is not None:
            self.connection.busy = False
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
        self.evicted = 0

    # ------------------------------------------------------------ admission
    def admit(self, address: Any) -> bool:
        """Make room for a new connection from ``address`` (closing idle ones);
        False: every connection is busy, refuse it."""
        self._forget_closed()
        mine = [c for c in self.connections.values() if _host(c.address) == _host(address)]
        if len(mine) >= self.per_client and not self._evict(mine):
            return False
        return len(self.connections) < self.limit or self._evict(list(self.connections.values()))

    def _evict(self, among: list[_Connection]) -> bool:
        idle = [c for c in among if not c.busy and not c.stream.closed()]
        if not idle:
            return False
        oldest = min(idle, key=lambda c: c.since)
        oldest.stream.close()
        self.connections.pop(id(oldest.stream), None)
        self.evicted += 1
        return True

    def _forget_closed(self) -> None:
        for key in [k for k, c in self.connections.items() if c.stream.closed()]:
            del self.connections[key]

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
        return _Tracked(inner, self.connections.get(id(stream)))


def _host(address: Any) -> Any:
    return address[0] if isinstance(address, tuple) else address

