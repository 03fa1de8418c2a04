"""``serve``: the HTTP server from the command line."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .. import config
from ..api.ollama import keep_alive_seconds
from ..engine.engine import Engine
from ..engine.pool import DEFAULT_KEEP_ALIVE_S, MOST_LOADED, SMALL_DEVICE_BYTES, ModelPool
from ..engine.protocol import ServedModels
from ..engine.single import SingleModel
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

def keep_alive(text: str) -> float | None:
    """``--keep-alive``: seconds, or a duration as a request's ``keep_alive``
    takes it ("5m", "1h"; negative: forever), in seconds (None: forever)."""
    try:
        value: float | str = float(text)
    except ValueError:
        value = text
    try:
        return keep_alive_seconds(value)
    except MnnEngineError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration (e.g. 5m, 1h, 300, -1 for forever)") \
            from None


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "never unload"
    if seconds == 0:
        return "unload after each request"
    return f"unload after {seconds / 60:g} min idle" if seconds >= 60 else f"unload after {seconds:g} s idle"


def _models(args: argparse.Namespace) -> tuple[ServedModels, Callable[[], None], str]:
    """What the server serves, how to let it go, and how to say it."""
    if args.no_switch:
        if args.max_loaded not in (None, 1):
            raise MnnEngineError("invalid_argument", "--no-switch serves one model: --max-loaded 1 or none",
                                 param="max_loaded")
        engine = Engine()
        model = args.model or engine.store.last_loaded()
        if model is None:
            raise MnnEngineError("model_not_found", "no MODEL given and no model loaded before: "
                                 "python -m mnn_engine serve MODEL --no-switch (a store ID or a model directory)")
        try:
            engine.load(model, **load_overrides(args))
        except BaseException:
            engine.close()
            raise
        return SingleModel(engine), engine.close, \
            f"{engine.active_model_id or model} for every request (--no-switch)"
    pool = ModelPool(defaults=load_overrides(args), max_loaded=args.max_loaded, keep_alive=args.keep_alive)
    try:
        count = pool.plan.models
        print(f"mnn-engine: up to {pool.max_loaded} model{'s' if pool.max_loaded > 1 else ''} loaded at once "
              f"({pool.plan.reason}); {_duration(pool.keep_alive)}", file=sys.stderr, flush=True)
        if args.model:
            pool.preload(args.model)
        what = f"the store ({count} model{'' if count == 1 else 's'}" + \
            (f", {pool.default_name} loaded and the default)" if pool.default_name else ")")
        if not count and not args.model:
            what += "; it is empty: POST /api/pull or python -m mnn_engine models pull NAME"
    except BaseException:
        pool.close()
        raise
    return pool, pool.close, what


def _serve(args: argparse.Namespace) -> int:
    from ..server.runner import bind, serve_forever

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for handler in logging.getLogger().handlers:  # MNN's chatter stays in engine.logs, off the terminal
        handler.addFilter(lambda record: record.name != "mnn_engine.mnn" or record.levelno >= logging.WARNING)
    host = "0.0.0.0" if args.all_interfaces else args.host
    key = _api_key(args)
    pull_if_missing(args)
    settings = ServerSettings(host=host, port=args.port, api_key=key, max_body_bytes=int(args.max_body_mb * 2**20),
                              allow_file_urls=args.allow_file_urls, cors_origins=tuple(args.cors_origin),
                              access_log=args.access_log, queue=args.queue, queue_timeout=args.queue_timeout,
                              allow_pull_urls=tuple(args.allow_pull_url)).validated()
    if not settings.loopback_only and not key:
        print(f"warning: serving on {host} without an API key: anyone on your network can use the model "
              "(set --api-key, --api-key-file or MNN_ENGINE_API_KEY)", file=sys.stderr)
    # the address first: a port in use is reported before a model loads
    sockets = bind(settings.host, settings.port)
    try:
        models, close, what = _models(args)
        try:
            def ready(url: str) -> None:
                print(f"mnn-engine: serving {what} at {url} (Ctrl-C stops)", file=sys.stderr, flush=True)

            serve_forever(models, settings, on_ready=ready, sockets=sockets)
        finally:
            close()
    finally:
        for sock in sockets:
            sock.close()
    return 0

def add_commands(commands: Any) -> None:
    """Register this module's commands."""
    p = commands.add_parser("serve", help="serve the store's models as OpenAI- and Ollama-compatible HTTP APIs")
    p.add_argument("model", nargs="?", help="a store ID or a model directory to load now, the default for requests "
                   "that name no model (without it: requests name the model they want, loaded on first use)")
    p.add_argument("--max-loaded", type=int, default=None, metavar="N",
                   help="models loaded at once; loading one more unloads the least recently used idle one "
                        f"(default: 1 under {SMALL_DEVICE_BYTES // 2**30} GiB of RAM, else as many of the largest "
                        f"model as half the RAM holds, at most {MOST_LOADED})")
    p.add_argument("--keep-alive", type=keep_alive, default=DEFAULT_KEEP_ALIVE_S, metavar="DURATION",
                   help="how long an idle model stays loaded (e.g. 5m, 1h, 0, -1 for forever; default 5m, as "
                        "Ollama's); a request's keep_alive wins")
    p.add_argument("--no-switch", action="store_true",
                   help="serve MODEL (default: the last one loaded) for every request, whatever model it names, "
                        "never loading another (one model for the server's life)")
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


