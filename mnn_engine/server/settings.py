"""The server's options, in one place: their defaults, their checks, and the
one object (``ServerSettings``) that the CLI (``serve``), ``Engine.start_server``
and the runner pass around."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..checks import invalid
from ..engine.protocol import ACQUIRE_TIMEOUT_S
from ..net import is_loopback_host
from ..options import check, option

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8081
#: requests that may wait for the model, first come first served (Ollama queues 512 by
#: default; a phone serves a handful of clients, so fewer); 0: 429 when busy
DEFAULT_QUEUE = 16
#: seconds a queued request waits for the model (its load included) before it is answered 429
DEFAULT_QUEUE_TIMEOUT = ACQUIRE_TIMEOUT_S


def _mib(text: str) -> int:
    """``--max-body-mb``, the older flag: MiB (a fraction allowed) as bytes."""
    mib = float(text)
    if not math.isfinite(mib):
        raise ValueError(f"not a size: {text!r}")
    return int(mib * 2**20)


@dataclass(frozen=True)
class ServerSettings:
    """How the HTTP server serves; each field's help says what it does (``serve --help``)."""

    host: str = option(DEFAULT_HOST, help="address to listen on")
    port: int = option(DEFAULT_PORT, low=0, high=65535, help="TCP port (0: any free port)")
    api_key: str | None = option(None, help=(
        "require Authorization: Bearer KEY on all but the public routes (none: no authentication; "
        "serve also reads --api-key-file and MNN_ENGINE_API_KEY)"))
    max_body_bytes: int = option(8 * 2**20, low=1, high=2**30, metavar="BYTES", legacy={"--max-body-mb": _mib},
                                 help="largest request body in bytes (the older --max-body-mb takes MiB)")
    allow_file_urls: bool = option(False, help="accept file:// image URLs (local files)")
    cors_origins: tuple[str, ...] = option((), aliases=("--cors-origin",), metavar="ORIGIN", help=(
        "let web pages from ORIGIN (e.g. http://localhost:3000; * for any) call the API; repeatable. By "
        "default only the server's own page can"))
    access_log: bool = option(False, help="log a line per HTTP request")
    queue: int = option(DEFAULT_QUEUE, low=0, metavar="N", help=(
        "let up to N requests wait for the model, first come first served (0: a request that finds the model "
        "busy gets 429 at once)"))
    queue_timeout: float = option(DEFAULT_QUEUE_TIMEOUT, low=0, above=True, metavar="S",
                                  help="seconds a queued request waits before it gets 429")
    allow_pull_urls: tuple[str, ...] = option((), aliases=("--allow-pull-url",), metavar="PATTERN", help=(
        "let /api/pull fetch manifest URLs matching PATTERN (shell-style, e.g. 'http://192.168.1.5:8000/*'); "
        "repeatable. By default clients may pull from the hubs and public https hosts only"))

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> ServerSettings:
        """Settings from keyword options (``Engine.start_server(port=0, ...)``); unknown ones are refused."""
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(options) - names)
        if unknown:
            raise invalid(unknown[0], f"unknown server option (known: {', '.join(sorted(names))})")
        values = dict(options)
        for name in ("cors_origins", "allow_pull_urls"):
            if name in values:
                values[name] = tuple(values[name] or ())
        return cls(**values).validated()

    def validated(self) -> ServerSettings:
        """These settings, or ``invalid_argument`` naming the wrong one."""
        check(self)
        if self.api_key is not None and not self.api_key.strip():
            raise invalid("api_key", "the API key is empty (None serves without authentication)")
        return self

    @property
    def loopback_only(self) -> bool:
        """Bound to loopback: requests whose Host is not a loopback name are refused (DNS rebinding)."""
        return is_loopback_host(self.host)
