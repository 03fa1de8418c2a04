"""``serve``: the HTTP server from the command line."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .. import config
from ..checks import invalid
from ..engine.engine import Engine
from ..engine.pool import ModelPool
from ..engine.protocol import ServedModels
from ..engine.settings import PoolSettings
from ..engine.single import SingleModel
from ..errors import MnnEngineError
from ..options import settings
from ..server.settings import ServerSettings
from .common import (
    add_load_options,
    add_pull_options,
    load_overrides,
    pull_if_missing,
)
from .flags import add_flags, given


def _api_key(args: argparse.Namespace) -> str | None:
    if args.api_key is not None:
        if not args.api_key.strip():
            raise invalid("api_key", "--api-key is empty: give a key, or leave the option out "
                                 "to serve without authentication")
        return args.api_key
    if args.api_key_file:
        try:
            key = Path(args.api_key_file).expanduser().read_text().strip()
        except OSError as exc:
            raise invalid("api_key_file", f"cannot read the API key file: {exc}") from exc
        if not key:
            raise invalid("api_key_file", "the API key file is empty")
        return key
    return config.api_key()

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
            raise invalid("max_loaded", "--no-switch serves one model: --max-loaded 1 or none")
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
    pool = ModelPool(defaults=load_overrides(args), **pool_settings(args))
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
    settings = ServerSettings(**{**given(ServerSettings, args), "host": host, "api_key": key}).validated()
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

def pool_settings(args: argparse.Namespace) -> dict[str, Any]:
    """``PoolSettings``' flags as ``ModelPool``'s arguments (keep-alive's None, forever, included)."""
    return {setting.name: getattr(args, setting.name) for setting in settings(PoolSettings)}


def add_commands(commands: Any) -> None:
    """Register this module's commands."""
    p = commands.add_parser("serve", help="serve the store's models as OpenAI- and Ollama-compatible HTTP APIs")
    p.add_argument("model", nargs="?", help="a store ID or a model directory to load now, the default for requests "
                   "that name no model (without it: requests name the model they want, loaded on first use)")
    add_flags(p, PoolSettings)
    p.add_argument("--no-switch", action="store_true",
                   help="serve MODEL (default: the last one loaded) for every request, whatever model it names, "
                        "never loading another (one model for the server's life)")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--all-interfaces", action="store_true", help="listen on 0.0.0.0 (use an API key)")
    keys = p.add_mutually_exclusive_group()
    keys.add_argument("--api-key-file", help="read the API key from this file")
    add_flags(p, ServerSettings, containers={"host": where, "api_key": keys})
    add_load_options(p)
    add_pull_options(p)
    p.set_defaults(func=_serve)
