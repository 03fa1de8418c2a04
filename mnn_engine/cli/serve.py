"""``serve``: the HTTP server from the command line."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import Any

from .. import config
from ..engine.engine import Engine
from ..errors import MnnEngineError
from ..server.settings import (
    DEFAULT_HOST,
    DEFAULT_MAX_BODY_BYTES,
    DEFAULT_PORT,
    DEFAULT_QUEUE,
    DEFAULT_QUEUE_TIMEOUT,
    ServerSettings,
)
from .common import (
    add_load_options,
    add_pull_options,
    body_mb,
    load_overrides,
    port,
    pull_if_missing,
)


def _api_key(args: argparse.Namespace) -> str | None:
    if args.api_key is not None:
        if not args.api_key.strip():
            raise MnnEngineError("invalid_argument", "--api-key is empty: give a key, or leave the option out "
                                 "to serve without authentication", param="api_key")
        return args.api_key
    if args.api_key_file:
        try:
            key = Path(args.api_key_file).expanduser().read_text().strip()
        except OSError as exc:
            raise MnnEngineError("invalid_argument", f"cannot read the API key file: {exc}",
                                 param="api_key_file") from exc
        if not key:
            raise MnnEngineError("invalid_argument", "the API key file is empty", param="api_key_file")
        return key
    return config.api_key()

def _serve(args: argparse.Namespace) -> int:
    from ..server.runner import bind, serve_forever

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for handler in logging.getLogger().handlers:  # MNN's chatter stays in engine.logs, off the terminal
        handler.addFilter(lambda record: record.name != "mnn_engine.mnn" or record.levelno >= logging.WARNING)
    host = "0.0.0.0" if args.all_interfaces else args.host
    key = _api_key(args)
    pull_if_missing(args)
    engine = Engine()
    model = args.model or engine.store.last_loaded()
    if model is None:
        raise MnnEngineError("model_not_found", "no MODEL given and no model loaded before: "
                             "python -m mnn_engine serve MODEL (a store ID or a model directory)")
    settings = ServerSettings(host=host, port=args.port, api_key=key, max_body_bytes=int(args.max_body_mb * 2**20),
                              allow_file_urls=args.allow_file_urls, cors_origins=tuple(args.cors_origin),
                              access_log=args.access_log, queue=args.queue, queue_timeout=args.queue_timeout,
                              allow_pull_urls=tuple(args.allow_pull_url)).validated()
    if not settings.loopback_only and not key:
        print(f"warning: serving on {host} without an API key: anyone on your network can use the model "
              "(set --api-key, --api-key-file or MNN_ENGINE_API_KEY)", file=sys.stderr)
    # the address first: a port in use is reported before the model loads
    sockets = bind(settings.host, settings.port)
    try:
        engine.load(model, **load_overrides(args))

        def ready(url: str) -> None:
            print(f"mnn-engine: serving {engine.active_model_id or model} at {url} (Ctrl-C stops)",
                  file=sys.stderr, flush=True)

        serve_forever(engine, settings, on_ready=ready, sockets=sockets)
    finally:
        for sock in sockets:
            sock.close()
        engine.close()
    return 0

def add_commands(commands: Any) -> None:
    """Register this module's commands."""
    p = commands.add_parser("serve", help="serve a model as an OpenAI-compatible HTTP API")
    p.add_argument("model", nargs="?", help="a store ID or a model directory (default: the last one loaded)")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--host", default=DEFAULT_HOST, help=f"address to listen on (default {DEFAULT_HOST})")
    where.add_argument("--all-interfaces", action="store_true", help="listen on 0.0.0.0 (use an API key)")
    p.add_argument("--port", type=port, default=DEFAULT_PORT)
    keys = p.add_mutually_exclusive_group()
    keys.add_argument("--api-key", help="require Authorization: Bearer KEY on /v1 routes")
    keys.add_argument("--api-key-file", help="read the API key from this file")
    p.add_argument("--cors-origin", action="append", default=[], metavar="ORIGIN",
                   help="let web pages from ORIGIN (e.g. http://localhost:3000; * for any) call the API; "
                        "repeatable. By default only the server's own page can")
    p.add_argument("--access-log", action="store_true", help="log a line per HTTP request")
    p.add_argument("--queue", type=int, default=DEFAULT_QUEUE, metavar="N",
                   help=f"let up to N requests wait for the model, first come first served (default "
                        f"{DEFAULT_QUEUE}; 0: a request that finds the model busy gets 429 at once)")
    p.add_argument("--queue-timeout", type=float, default=DEFAULT_QUEUE_TIMEOUT, metavar="S",
                   help=f"seconds a queued request waits before it gets 429 (default {DEFAULT_QUEUE_TIMEOUT:g})")
    p.add_argument("--max-body-mb", type=body_mb, default=DEFAULT_MAX_BODY_BYTES / 2**20,
                   help=f"largest request body in MiB (default {DEFAULT_MAX_BODY_BYTES / 2**20:g})")
    p.add_argument("--allow-file-urls", action="store_true", help="accept file:// image URLs (local files)")
    p.add_argument("--allow-pull-url", action="append", default=[], metavar="PATTERN",
                   help="let /api/pull fetch manifest URLs matching PATTERN (shell-style, e.g. "
                        "'http://192.168.1.5:8000/*'); repeatable. By default clients may pull from the hubs and "
                        "public https hosts only")
    add_load_options(p)
    add_pull_options(p)
    p.set_defaults(func=_serve)


