"""The server's options, in one place: their defaults, their checks, and the
one object (``ServerSettings``) that the CLI (``serve``), ``Engine.start_server``
and the runner pass around."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import MnnEngineError, is_int, is_number
from ..net import is_loopback_host

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8081
DEFAULT_MAX_BODY_BYTES = 8 * 1024 * 1024
#: requests that may wait for the model, first come first served (Ollama queues 512 by
#: default; a phone serves a handful of clients, so fewer); 0: 429 when busy
DEFAULT_QUEUE = 16
#: seconds a queued request waits for the model before it is answered 429
DEFAULT_QUEUE_TIMEOUT = 60.0


@dataclass(frozen=True)
class ServerSettings:
    """How the HTTP server serves (see the README's *serve* options)."""

    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT  # 0: any free port (background servers)
    #: required as ``Authorization: Bearer KEY`` on all but the public routes (None: no authentication)
    api_key: str | None = None
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    #: accept file:// image URLs (local files)
    allow_file_urls: bool = False
    #: other web pages' origins allowed to call the API ("*": any)
    cors_origins: tuple[str, ...] = ()
    #: a log line per request
    access_log: bool = False
    #: requests that may wait for the model (0: a second one gets 429 at once)
    queue: int = DEFAULT_QUEUE
    queue_timeout: float = DEFAULT_QUEUE_TIMEOUT
    #: manifest URLs /api/pull may fetch beyond the hubs and public https hosts (shell patterns)
    allow_pull_urls: tuple[str, ...] = ()

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> ServerSettings:
        """Settings from keyword options (``Engine.start_server(port=0, ...)``); unknown ones are refused."""
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(options) - names)
        if unknown:
            raise MnnEngineError("invalid_argument", f"unknown server option {unknown[0]!r} (known: "
                                 f"{', '.join(sorted(names))})", param=unknown[0])
        values = dict(options)
        for name in ("cors_origins", "allow_pull_urls"):
            if name in values:
                values[name] = tuple(values[name] or ())
        return cls(**values).validated()

    def validated(self) -> ServerSettings:
        """These settings, or ``invalid_argument`` naming the wrong one."""
        port = self.port
        if not is_int(port) or not 0 <= port <= 65535:
            raise MnnEngineError("invalid_argument", f"port must be from 1 to 65535 (got {port!r})", param="port")
        if self.api_key is not None and not self.api_key.strip():
            raise MnnEngineError("invalid_argument", "the API key is empty (None serves without authentication)",
                                 param="api_key")
        size = self.max_body_bytes
        if not is_int(size) or size < 1:
            raise MnnEngineError("invalid_argument", f"max_body_bytes must be a positive integer (got {size!r})",
                                 param="max_body_bytes")
        if not is_int(self.queue) or self.queue < 0:
            raise MnnEngineError("invalid_argument", f"queue must be a whole number >= 0 (got {self.queue!r})",
                                 param="queue")
        timeout = self.queue_timeout
        if not is_number(timeout) or not timeout > 0:
            raise MnnEngineError("invalid_argument", f"queue_timeout must be > 0 seconds (got {timeout!r})",
                                 param="queue_timeout")
        if not all(isinstance(v, str) for v in (*self.cors_origins, *self.allow_pull_urls)):
            raise MnnEngineError("invalid_argument", "cors_origins and allow_pull_urls take strings",
                                 param="cors_origins")
        return self

    @property
    def loopback_only(self) -> bool:
        """Bound to loopback: requests whose Host is not a loopback name are refused (DNS rebinding)."""
        return is_loopback_host(self.host)
