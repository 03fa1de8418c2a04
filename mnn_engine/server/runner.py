"""Starting and stopping the HTTP server: in the foreground (``serve``) or on
a background thread (notebooks, tests).

Stopping goes: refuse new requests (503 ``server_stopping``), cancel the
active generation and let its handler finish, close the listening sockets.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import resource
import signal
import socket
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tornado.iostream import IOStream
from tornado.netutil import bind_sockets

from ..checks import invalid
from ..errors import MnnEngineError
from .app import ServerContext
from .events import EventFanout
from .http_server import ApiHTTPServer
from .metrics import Metrics
from .queue import GenerationQueue
from .routes import make_app
from .settings import ServerSettings

if TYPE_CHECKING:
    from ..engine.protocol import ServedModels

log = logging.getLogger("mnn_engine.server")

STOP_GRACE_SECONDS = 10.0
#: after SIGINT or SIGTERM, the process ends within this even if an engine call never returns
EXIT_DEADLINE_SECONDS = 30.0
MAX_CONNECTIONS = 256
FDS_KEPT_FREE = 24  # for the model's files, logs, the scratch directory, the first-touch child
ACCEPT_PAUSE_SECONDS = 0.5
#: one client address holds at most this share of the connections (1/4)
PER_CLIENT_SHARE = 4


@dataclass
class RunningServer:
    ctx: ServerContext
    http: ApiHTTPServer
    url: str
    loop: asyncio.AbstractEventLoop
    listeners: list[Listener]
    thread: threading.Thread | None = None
    stopped: asyncio.Event | None = None


def connection_limit() -> int:
    """Connections served at once: what the process's file limit leaves room for."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        soft = 4096
    return max(8, min(MAX_CONNECTIONS, soft - FDS_KEPT_FREE))


class Listener:
    """Accepts connections on one listening socket for the HTTP server.

    Tornado's own accept loop raises on EMFILE and the IOLoop then retries
    at once, forever (98 % CPU and a traceback per try). Here, when the
    process is out of file descriptors, accepting pauses for a moment and
    the condition is logged once. A connection that finds the server full
    closes the oldest idle one (``ApiHTTPServer.admit``); only when every
    connection is busy is the new one closed at once (the client sees a
    reset). Accepted sockets go to the server through ``handle_stream``,
    TCPServer's public hook, as Tornado's own accept loop hands them."""

    def __init__(self, sock: socket.socket, http: ApiHTTPServer) -> None:
        self.sock, self.http = sock, http
        self.loop = asyncio.get_running_loop()
        self.paused = False
        self.refused = 0
        sock.setblocking(False)
        self.loop.add_reader(sock.fileno(), self._accept)

    def _accept(self) -> None:
        for _ in range(64):
            try:
                conn, address = self.sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except ConnectionAbortedError:
                continue
            except OSError as exc:
                if exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    self._pause(exc)
                    return
                raise
            if self.paused:
                self.paused = False
                log.warning("accepting connections again (%d refused over the limit meanwhile)", self.refused)
            if not self.http.admit(address):
                if self.refused == 0:
                    log.warning("%d connections are open and busy, the most this process serves; closing new ones",
                                self.http.limit)
                self.refused += 1
                conn.close()
                continue
            self.refused = 0
            conn.setblocking(False)
            stream = IOStream(conn, max_buffer_size=self.http.max_buffer_size,
                              read_chunk_size=self.http.read_chunk_size)
            self.http.handle_stream(stream, address)

    def _pause(self, exc: OSError) -> None:
        if not self.paused:
            log.error("out of file descriptors (%s): pausing accepts; %d connections open", exc.strerror,
                      self.http.open_connections)
        self.paused = True
        self.loop.remove_reader(self.sock.fileno())
        self.loop.call_later(ACCEPT_PAUSE_SECONDS, self._resume)

    def _resume(self) -> None:
        if self.sock.fileno() >= 0:
            self.loop.add_reader(self.sock.fileno(), self._accept)

    def close(self) -> None:
        if self.sock.fileno() >= 0:
            self.loop.remove_reader(self.sock.fileno())
            self.sock.close()


_servers: dict[int, RunningServer] = {}
_servers_lock = threading.Lock()


def bind(host: str, port: int) -> list[socket.socket]:
    """Listening sockets for ``host:port`` (port 0: any free port; the port is
    checked by ``ServerSettings.validated``); ``port_in_use`` when it is taken."""
    try:
        return bind_sockets(port, address=host, reuse_port=False)
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise MnnEngineError("port_in_use", f"{host}:{port} is already in use; pick another --port") from exc
        raise invalid("host", f"cannot listen on {host}:{port}: {exc.strerror}") from exc


def _url(sockets: list[socket.socket], host: str) -> str:
    port = sockets[0].getsockname()[1]
    shown = "127.0.0.1" if host in ("0.0.0.0", "") else ("[::1]" if host == "::" else host)
    if ":" in shown and not shown.startswith("["):
        shown = f"[{shown}]"
    return f"http://{shown}:{port}"


async def _start(models: ServedModels, settings: ServerSettings,
                 sockets: list[socket.socket] | None = None) -> RunningServer:
    settings.validated()
    models.require_ready_for_server()
    models.set_server_state("starting")
    try:
        sockets = sockets or bind(settings.host, settings.port)
    except MnnEngineError:
        models.set_server_state("stopped")
        raise
    try:
        ctx = ServerContext(models, settings=settings, metrics=Metrics(models))
        ctx.queue = GenerationQueue(models, settings.queue, settings.queue_timeout,
                                    on_timeout=ctx.metrics.queue_timeouts.inc)
        ctx.metrics.queue = ctx.queue
        ctx.events = EventFanout(models.events, asyncio.get_running_loop())
        limit = connection_limit()
        http = ApiHTTPServer(make_app(ctx), limit=limit, per_client=max(4, limit // PER_CLIENT_SHARE),
                             body_limit=settings.max_body_bytes)
        listeners = [Listener(sock, http) for sock in sockets]
        url = _url(sockets, settings.host)
    except BaseException:  # a failure after the bind: the sockets go, and the state says stopped, not starting
        for sock in sockets:
            sock.close()
        models.set_server_state("stopped")
        raise
    models.set_server_state("running", url)
    log.info("serving %s at %s", models.default_name if not models.switching else "the store", url)
    return RunningServer(ctx, http, url, asyncio.get_running_loop(), listeners, stopped=asyncio.Event())


async def _stop(server: RunningServer) -> None:
    ctx = server.ctx
    if ctx.stopping:
        return
    ctx.stopping = True
    ctx.queue.close()  # first: the waiting are answered 503, not woken by the cancels below
    ctx.models.set_server_state("stopping", server.url)
    for handler in list(ctx.active):
        handler.cancel()
    for stop in list(ctx.pull_stops):  # pulls end at their next chunk; their daemon threads never hold the exit
        stop.set()
    deadline = asyncio.get_running_loop().time() + STOP_GRACE_SECONDS
    while ctx.active and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.01)
    for listener in server.listeners:
        listener.close()
    server.http.stop_sweeping()
    await server.http.close_all_connections()
    ctx.metrics.close()
    ctx.events.close()
    ctx.models.set_server_state("stopped")
    log.info("server stopped")
    if server.stopped is not None:
        server.stopped.set()


# ---------------------------------------------------------------- foreground
def serve_forever(models: ServedModels, settings: ServerSettings, *, on_ready: Any = None,
                  sockets: list[socket.socket] | None = None) -> None:
    """Serve until SIGINT or SIGTERM, then stop the server (the caller
    unloads the models). ``sockets``: already bound ones (``bind``), else the
    settings' host and port."""

    async def main() -> None:
        server = await _start(models, settings, sockets)
        loop = asyncio.get_running_loop()
        stopping: set[asyncio.Future[None]] = set()

        def stop() -> None:
            arm_exit_deadline()
            stopping.add(asyncio.ensure_future(_stop(server)))

        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop)
        if on_ready is not None:
            on_ready(server.url)
        assert server.stopped is not None
        await server.stopped.wait()

    asyncio.run(main())


_exit_timer: threading.Timer | None = None


def arm_exit_deadline(seconds: float | None = None) -> None:
    """Once a stop signal came: end the process in ``seconds`` whatever still runs. An engine call
    cannot be interrupted from Python (MNN's stb_image once looped for good on a cut PNG, inside the
    tokenizer on the generation thread), and the models' unload waits for it: without this the
    server would outlive every SIGTERM. Idempotent; a daemon timer, so a normal exit never waits."""
    global _exit_timer
    if _exit_timer is not None:
        return
    seconds = EXIT_DEADLINE_SECONDS if seconds is None else seconds

    def force_exit() -> None:
        log.critical("the server did not stop within %.0f s of the stop signal (an engine call that does not "
                     "return holds it); exiting now", seconds)
        for handler in logging.getLogger().handlers:
            with contextlib.suppress(Exception):
                handler.flush()
        os._exit(1)

    _exit_timer = threading.Timer(seconds, force_exit)
    _exit_timer.daemon = True
    _exit_timer.start()


# ---------------------------------------------------------------- background
def start_background_server(models: ServedModels, settings: ServerSettings | None = None, *, owner: Any = None,
                            **options: Any) -> str:
    """Run the server on its own thread and event loop; returns its URL once
    it listens (or raises, e.g. ``port_in_use``). ``options``: the fields of
    ``ServerSettings`` (``port=0`` takes any free port). ``owner`` (default:
    ``models``) is what ``stop_background_server`` is given to stop it."""
    chosen = settings if settings is not None else ServerSettings.from_options(options)
    ready = threading.Event()
    outcome: dict[str, Any] = {}

    def run() -> None:
        async def main() -> None:
            try:
                server = await _start(models, chosen)
            except BaseException as exc:
                outcome["error"] = exc
                ready.set()
                return
            server.thread = threading.current_thread()
            outcome["server"] = server
            ready.set()
            assert server.stopped is not None
            await server.stopped.wait()

        asyncio.run(main())

    thread = threading.Thread(target=run, name="mnn-engine-server", daemon=True)
    thread.start()
    ready.wait()
    if "error" in outcome:
        thread.join()
        raise outcome["error"]
    server: RunningServer = outcome["server"]
    with _servers_lock:
        _servers[id(owner if owner is not None else models)] = server
    return server.url


def stop_background_server(owner: Any) -> None:
    """Stop the background server started for ``owner`` and wait for it to finish."""
    with _servers_lock:
        server = _servers.pop(id(owner), None)
    if server is None:
        raise MnnEngineError("server_not_running", "no server is running for this engine")
    future = asyncio.run_coroutine_threadsafe(_stop(server), server.loop)
    future.result(timeout=STOP_GRACE_SECONDS + 5)
    if server.thread is not None:
        server.thread.join(timeout=5)
