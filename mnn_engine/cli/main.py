"""Command line: ``python -m mnn_engine ...``.

Human-readable output by default, ``--json`` for scripts. Errors print
``error: [code] message`` on stderr and exit with status 2 (1 for usage errors).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import math
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from .. import __version__, config, jsonutil
from ..engine.engine import MEMORY_MODES, PRECISIONS, Engine, LoadOptions, preset_options
from ..errors import MnnEngineError
from ..hub import catalog
from ..runtime.build import BACKENDS, backend_capabilities, build_info
from ..runtime.llm import DEFAULT_DRAFT_TOKENS
from ..runtime.sampling import MAX_DRAFT_TOKENS, SPECULATIVE
from ..server.settings import (
    DEFAULT_HOST,
    DEFAULT_MAX_BODY_BYTES,
    DEFAULT_PORT,
    DEFAULT_QUEUE_TIMEOUT,
    ServerSettings,
)
from ..store.layout import ModelInfo, model_id_from_name
from ..store.models import ModelStore


def _print_json(data: Any) -> None:
    print(json.dumps(data, indent=2, ensure_ascii=False))


def _size(n: float) -> str:
    """Bytes in IEC units (KiB, MiB, GiB), as everywhere in mnn-engine."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


def _progress_bar(verb: str = "importing", stream=sys.stderr) -> Callable[[int, int, str], None]:
    """A one-line bar with the speed (over this run's bytes) and the time left."""
    start = time.monotonic()
    last = [0.0]
    first: list[int] = []

    def show(done: int, total: int, _name: str) -> None:
        now = time.monotonic()
        if not first:
            first.append(done)  # bytes a resumed pull already had do not count for the speed
        if done < total and now - last[0] < 0.1:
            return
        last[0] = now
        fraction = done / total if total else 1.0
        filled = int(fraction * 30)
        speed = (done - first[0]) / max(now - start, 1e-3)
        eta = f" {(total - done) / speed:4.0f} s left" if speed > 0 and done < total else ""
        stream.write(f"\r{verb} [{'#' * filled}{'.' * (30 - filled)}] {fraction:4.0%} "
                     f"{_size(done)} / {_size(total)}  {_size(int(speed))}/s{eta}   ")
        if done >= total:
            stream.write("\n")
        stream.flush()

    return show


def _show_progress(args: argparse.Namespace) -> bool:
    return not getattr(args, "json", False) and (sys.stderr.isatty() or getattr(args, "progress", False))


def _model_line(info: ModelInfo) -> str:
    visual = "  vision" if info.is_visual else ""
    return f"{info.id:<32} {_size(info.size_bytes):>10}  {info.name}{visual}"


# ---------------------------------------------------------------- models
def _models_import(args: argparse.Namespace) -> int:
    store = ModelStore()
    progress = _progress_bar() if _show_progress(args) else None
    info = store.import_model(args.path, model_id=args.id, replace=args.replace, progress=progress)
    if args.json:
        _print_json(info.to_dict())
    else:
        print(f"imported {info.id} ({_size(info.size_bytes)}) into {info.path}")
    return 0


def _models_list(args: argparse.Namespace) -> int:
    models = ModelStore().list()
    if args.json:
        _print_json([m.to_dict() for m in models])
    elif not models:
        print(f"no models in {ModelStore().models_dir} (add one with: python -m mnn_engine models import PATH)")
    else:
        for info in models:
            print(_model_line(info))
    return 0


def _models_info(args: argparse.Namespace) -> int:
    info = ModelStore().get(args.id)
    if args.json:
        _print_json(info.to_dict())
    else:
        print(f"id        {info.id}\nname      {info.name}\npath      {info.path}\n"
              f"size      {_size(info.size_bytes)}\nvision    {'yes' if info.is_visual else 'no'}\n"
              f"created   {time.strftime('%Y-%m-%d %H:%M', time.localtime(info.created))}")
        if info.source:
            print(f"source    {info.source['source']}:{info.source['repo']} at {info.source['commit']}")
        if info.previous:
            print(f"previous  revision {info.previous['revision'] or '-'}, {_size(info.previous['size_bytes'])} "
                  "(models rollback restores it)")
        print("files")
        for name in info.files:
            print(f"  {name}")
    return 0


def _models_pull(args: argparse.Namespace) -> int:
    store = ModelStore()
    progress = _progress_bar("pulling") if _show_progress(args) else None
    info = store.pull(args.spec, model_id=args.id, revision=args.revision, source=args.source, update=args.update,
                      progress=progress)
    if args.json:
        _print_json(info.to_dict())
    else:
        revision = (info.source or {}).get("commit") or "-"
        print(f"{info.id}: {_size(info.size_bytes)} at revision {revision[:12]} in {info.path}")
    return 0


def _models_catalog(args: argparse.Namespace) -> int:
    store = ModelStore()
    mnn = build_info()["mnn_version"]
    rows = []
    for entry in catalog.entries():
        installed = store.exists(model_id_from_name(entry.name))
        rows.append({**entry.to_dict(), "id": model_id_from_name(entry.name), "installed": installed,
                     "supported": entry.supported_by(mnn)})
    if args.json:
        _print_json(rows)
        return 0
    for row in rows:
        size = ("" if row["size_exact"] else "~") + _size(row["size_bytes"])
        flags = " ".join(f for f, on in (("thinking", row["thinking"]), ("vision", row["vision"])) if on)
        state = "installed" if row["installed"] else "" if row["supported"] else f"needs MNN {row['min_mnn']}"
        print(f"{row['name']:<20} {row['parameters']:>5} {size:>10}  {flags:<16} {state}")
    print(f"pull one with: python -m mnn_engine models pull NAME (this build has MNN {mnn})", file=sys.stderr)
    return 0


def _models_rollback(args: argparse.Namespace) -> int:
    info = ModelStore().rollback(args.id)
    print(f"{info.id} is back at revision {((info.source or {}).get('commit') or '-')[:12]}")
    return 0


def _pull_if_missing(args: argparse.Namespace) -> None:
    """A catalog name not in the store yet is pulled before a load (asking
    first when stdin is a terminal, unless --yes)."""
    name = args.model
    if not name or Path(name).expanduser().exists():
        return
    store = ModelStore()
    with contextlib.suppress(MnnEngineError):
        store.resolve(name)
        return
    entry = catalog.find(name)
    if entry is None:
        return  # the load says the model is unknown
    source = args.source or "hf"
    where = "Hugging Face" if source == "hf" else "ModelScope"
    if sys.stdin.isatty() and not args.yes:
        answer = input(f"{name} is not in the store. Pull it from {where} ({entry.repo(source)}, "
                       f"about {_size(entry.size_bytes)})? [Y/n] ")
        if answer.strip().lower() not in ("", "y", "yes"):
            raise MnnEngineError("model_not_found", f"{name} is not in the store (pull it with: "
                                 f"python -m mnn_engine models pull {name})", param="model")
    info = store.pull(name, source=args.source, progress=_progress_bar("pulling") if sys.stderr.isatty() else None)
    args.model = info.id


def _models_rename(args: argparse.Namespace) -> int:
    info = ModelStore().rename(args.old, args.new)
    print(f"renamed {args.old} -> {info.id}")
    return 0


def _models_rm(args: argparse.Namespace) -> int:
    ModelStore().delete(args.id)
    print(f"deleted {args.id}")
    return 0


# ---------------------------------------------------------------- caches, backends
def _cache_show(args: argparse.Namespace) -> int:
    sizes = ModelStore().cache_info(args.id)
    if args.json:
        _print_json(sizes)
    elif not sizes:
        print("no caches")
    else:
        for model_id, size in sizes.items():
            print(f"{model_id:<32} {_size(size):>10}")
    return 0


def _cache_clear(args: argparse.Namespace) -> int:
    freed = ModelStore().clear_cache(args.id)
    print(f"freed {_size(freed)}")
    return 0


def _backends(args: argparse.Namespace) -> int:
    caps = backend_capabilities()
    if args.json:
        _print_json(caps)
    else:
        for name, cap in caps.items():
            compiled = "compiled" if cap["compiled"] else "not compiled"
            available = "available" if cap["available"] else "unavailable"
            print(f"{name:<8} {compiled:<13} {available}")
    return 0


def _info(args: argparse.Namespace) -> int:
    info = {"build": build_info(), "backends": backend_capabilities(), "json": jsonutil.BACKEND,
            "store": str(ModelStore().root)}
    if args.json:
        _print_json(info)
        return 0
    build = info["build"]
    print(f"mnn-engine {build['mnn_engine_version']} ({build['mode']} build)")
    print(f"MNN        {build['mnn_version']} from {build['mnn_source']}")
    if build["mnn_commit"]:
        print(f"commit     {build['mnn_commit']}")
    print(f"compiler   {build['compiler']} ({build['cpu_family']}, {build['system']}, {build['buildtype']})")
    print(f"flags      {build['flags'] or '-'}")
    usable = [name for name, cap in info["backends"].items() if cap["available"]]
    print(f"backends   compiled {', '.join(build['backends_compiled'])}; available {', '.join(usable)}")
    print(f"json       {info['json']}")
    print(f"store      {info['store']}")
    return 0


# ---------------------------------------------------------------- generation
_LOAD_FLAGS = {"backend": "backend", "use_mmap": "mmap", "precision": "precision", "threads": "threads",
               "dynamic_option": "dynamic_option", "quant_qkv": "kv_quant", "context_length": "context_length",
               "prompt_cache": "prompt_cache", "memory": "memory", "speculative": "speculative",
               "draft_tokens": "draft_tokens"}


def _load_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The load options given on the command line (the rest come from the model's preset)."""
    given = {field: getattr(args, flag) for field, flag in _LOAD_FLAGS.items()}
    return {field: value for field, value in given.items() if value is not None}


def _line_history(store: ModelStore, model_id: str | None) -> Callable[[], None]:
    """Line editing and a per-model input history for ``chat`` (stdlib
    readline, where the platform has it); returns what saves the history."""
    try:
        import readline
    except ImportError:  # pragma: no cover - e.g. Windows
        return lambda: None
    path = store.root / "history" / f"{model_id or 'model-dirs'}.txt"
    readline.set_history_length(1000)
    with contextlib.suppress(OSError):
        readline.read_history_file(path)

    def save() -> None:
        with contextlib.suppress(OSError):
            path.parent.mkdir(parents=True, exist_ok=True)
            readline.write_history_file(path)

    return save


def _chat(args: argparse.Namespace) -> int:
    _pull_if_missing(args)
    engine = Engine()
    save_history: Callable[[], None] = lambda: None  # noqa: E731
    try:
        engine.load(args.model, **_load_overrides(args))
        save_history = _line_history(engine.store, engine.active_model_id)
        messages: list[dict[str, str]] = []
        if args.system:
            messages.append({"role": "system", "content": args.system})
        print("Type a message; Ctrl-C stops an answer, Ctrl-D quits.", file=sys.stderr)
        while True:
            try:
                text = input("you> ")
            except EOFError:
                print(file=sys.stderr)
                return 0
            except KeyboardInterrupt:
                print(file=sys.stderr)
                continue
            if not text.strip():
                continue
            messages.append({"role": "user", "content": text})
            reply: list[str] = []
            try:
                for piece in engine.stream_chat(messages, max_tokens=args.max_tokens, temperature=args.temperature,
                                                enable_thinking=args.think, context_overflow="truncate"):
                    reply.append(piece)
                    sys.stdout.write(piece)
                    sys.stdout.flush()
            except KeyboardInterrupt:
                sys.stdout.write(" [stopped]")
            sys.stdout.write("\n")
            messages.append({"role": "assistant", "content": "".join(reply)})
            save_history()
            dropped = engine.last_result.dropped_messages if engine.last_result is not None else 0
            if dropped:  # the conversation outgrew the context: its oldest turns are gone for good
                system = 1 if args.system else 0
                del messages[system:system + dropped]
                print(f"[the {dropped} oldest messages no longer fit the context and were left out]",
                      file=sys.stderr)
    finally:
        engine.close()


def _response_format(args: argparse.Namespace) -> dict[str, Any]:
    """``--json-schema FILE``: the answer follows that JSON Schema."""
    if not args.json_schema:
        return {}
    try:
        schema = json.loads(Path(args.json_schema).expanduser().read_text())
    except (OSError, ValueError) as exc:
        raise MnnEngineError("invalid_argument", f"--json-schema {args.json_schema}: {exc}", param="json_schema") \
            from exc
    return {"response_format": {"type": "json_schema", "json_schema": {"name": "cli", "schema": schema}}}


def _generate(args: argparse.Namespace) -> int:
    prompt: Any = args.prompt if args.raw else [{"role": "user", "content": args.prompt}]

    def write(piece: str) -> None:
        sys.stdout.write(piece)
        sys.stdout.flush()

    _pull_if_missing(args)
    with Engine() as engine:
        engine.load(args.model, **_load_overrides(args))
        with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C cancels the generation; print what came
            engine.generate(prompt, callback=write, max_tokens=args.max_tokens, temperature=args.temperature,
                            seed=args.seed, enable_thinking=args.think, **_response_format(args))
        sys.stdout.write("\n")
        result = engine.last_result
    if result is not None and args.stats:
        print(json.dumps({
            "finish_reason": result.finish_reason,
            "prompt_tokens": result.prompt_tokens,
            "completion_tokens": result.completion_tokens,
            "time_to_first_token_ms": round(result.time_to_first_token_ms, 1),
            "prefill_tokens_per_second": round(result.prefill_tokens_per_second, 1),
            "decode_tokens_per_second": round(result.decode_tokens_per_second, 1),
        }), file=sys.stderr)
    return 0


def _bench(args: argparse.Namespace) -> int:
    from . import bench

    progress = None if args.json else bench.stderr_progress
    overrides = _load_overrides(args)
    if args.tune:
        options = LoadOptions(**overrides).validate()  # tuning starts from the defaults, not an old preset
        result = bench.tune(args.model, options, prompt_len=args.prompt_len, gen=args.gen, runs=args.runs,
                            progress=progress, exact=args.exact)
        print(json.dumps(result, indent=2) if args.json else bench.format_tune(result))
        return 0
    store = ModelStore()
    options = preset_options(store, store.resolve(args.model)[0], **overrides)
    report = bench.bench(args.model, options, prompt_len=args.prompt_len, gen=args.gen, runs=args.runs,
                         store=store, progress=progress)
    print(json.dumps(report, indent=2) if args.json else bench.format_report(report))
    return 0


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
    _pull_if_missing(args)
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
        engine.load(model, **_load_overrides(args))

        def ready(url: str) -> None:
            print(f"mnn-engine: serving {engine.active_model_id or model} at {url} (Ctrl-C stops)",
                  file=sys.stderr, flush=True)

        serve_forever(engine, settings, on_ready=ready, sockets=sockets)
    finally:
        for sock in sockets:
            sock.close()
        engine.close()
    return 0


# ---------------------------------------------------------------- parser
def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        port = -1
    if not 1 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a TCP port (1-65535)")
    return port


def _body_mb(text: str) -> float:
    try:
        size = float(text)
    except ValueError:
        size = math.nan
    if not (math.isfinite(size) and 0 < size <= 1024):
        raise argparse.ArgumentTypeError(f"{text!r} is not a size in MiB from 0 to 1024")
    return size


def _add_load_options(parser: argparse.ArgumentParser) -> None:
    """Load flags; each one not given comes from the model's tuned preset, else the default."""
    parser.add_argument("--backend", choices=BACKENDS, default=None, help="default cpu")
    parser.add_argument("--threads", type=int, default=None,
                        help="1..8 (default: the performance cores this process may use, at most 4)")
    parser.add_argument("--mmap", action=argparse.BooleanOptionalAction, default=None,
                        help="memory-map the weights from a cache in the store (default: on)")
    parser.add_argument("--precision", choices=PRECISIONS, default=None, help="default low")
    parser.add_argument("--dynamic-option", type=int, default=None, help="MNN's dynamic_option 0..8")
    parser.add_argument("--kv-quant", type=int, default=None,
                        help="MNN's KV-cache quantisation quant_qkv: 0 off (default), 1 or 2 quantised keys "
                             "(faster decode, slightly different outputs)")
    parser.add_argument("--context-length", type=int, default=None, metavar="N",
                        help="tokens of context (prompt + answer; MNN's max_all_tokens); fewer bounds the KV "
                             "cache's memory (default: the model's config)")
    parser.add_argument("--prompt-cache", action=argparse.BooleanOptionalAction, default=None,
                        help="keep the KV cache between generations and prefill only what changed (default: on; "
                             "outputs are the same either way)")
    parser.add_argument("--memory", choices=MEMORY_MODES, default=None,
                        help="MNN's weight mode: low (int4 weights, the fastest decode) or normal/high (float "
                             "weights, several times the memory) (default: the model's, usually low)")
    parser.add_argument("--speculative", choices=("auto", *SPECULATIVE), default=None,
                        help="speculative decoding: ngram drafts tokens by prompt lookup and verifies them in one "
                             "forward, keeping only what the sampler draws; auto (the default) turns it on with "
                             "float weights, where it changes no token, and off with low-memory int4 weights, "
                             "where MNN's batched kernels make outputs drift")
    parser.add_argument("--draft-tokens", type=int, default=None, metavar="N",
                        help=f"most draft tokens one verification checks, 1..{MAX_DRAFT_TOKENS} "
                             f"(default {DEFAULT_DRAFT_TOKENS})")


def _add_pull_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--yes", action="store_true", help="pull a catalog model that is not in the store "
                        "without asking")
    parser.add_argument("--source", choices=("hf", "modelscope"), default=None,
                        help="where a catalog model is pulled from (default hf)")


def _add_sampling(parser: argparse.ArgumentParser, max_tokens: int) -> None:
    parser.add_argument("--max-tokens", type=int, default=max_tokens)
    parser.add_argument("--temperature", type=float, default=None, help="default: the model's own")
    parser.add_argument("--think", action=argparse.BooleanOptionalAction, default=None,
                        help="turn a thinking model's reasoning on or off")


def _command(group: Any, name: str, func: Callable[[argparse.Namespace], int], help_text: str,
             *positional: str, json_output: bool = False) -> argparse.ArgumentParser:
    """A sub-command with its positional arguments (``name?`` = optional) and ``--json``."""
    p = group.add_parser(name, help=help_text)
    for arg in positional:
        p.add_argument(arg.rstrip("?"), nargs="?" if arg.endswith("?") else None)
    if json_output:
        p.add_argument("--json", action="store_true")
    p.set_defaults(func=func)
    return p


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m mnn_engine", description="Run MNN language models.")
    parser.add_argument("--version", action="version", version=f"mnn-engine {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    models = commands.add_parser("models", help="manage the model store").add_subparsers(
        dest="models_command", required=True, metavar="ACTION")
    p = _command(models, "import", _models_import, "copy a model directory into the store", "path", json_output=True)
    p.add_argument("--id", help="model ID (default: the directory name, slugged)")
    p.add_argument("--replace", action="store_true", help="replace a model with the same ID")
    p.add_argument("--progress", action="store_true", help="show progress even when stderr is not a terminal")
    p = _command(models, "pull", _models_pull, "download a model: a catalog name, hf:ORG/NAME, modelscope:ORG/NAME "
                 "or a manifest URL", "spec", json_output=True)
    p.add_argument("--id", help="model ID (default: the catalog name or repository name, slugged)")
    p.add_argument("--revision", help="branch, tag or commit (default: main on hf, master on modelscope)")
    _add_pull_options(p)
    p.add_argument("--update", action="store_true", help="fetch the newest revision of a stored model; the "
                   "current one is kept for models rollback")
    p.add_argument("--progress", action="store_true", help="show progress even when stderr is not a terminal")
    _command(models, "catalog", _models_catalog, "models you can pull by name", json_output=True)
    _command(models, "rollback", _models_rollback, "go back to the version the last update replaced", "id")
    _command(models, "list", _models_list, "list the models", json_output=True)
    _command(models, "info", _models_info, "show one model", "id", json_output=True)
    _command(models, "rename", _models_rename, "change a model's ID", "old", "new")
    _command(models, "rm", _models_rm, "delete a model", "id")

    cache = commands.add_parser("cache", help="mmap and GPU caches").add_subparsers(
        dest="cache_command", required=True, metavar="ACTION")
    _command(cache, "show", _cache_show, "cache sizes", "id?", json_output=True)
    _command(cache, "clear", _cache_clear, "delete caches (the next load rebuilds them)", "id?")
    _command(commands, "info", _info, "how this installation was built (provenance) and what it can use",
             json_output=True)
    _command(commands, "backends", _backends, "which backends are compiled in and available", json_output=True)

    p = commands.add_parser("chat", help="chat with a model in the terminal")
    p.add_argument("model", help="a store ID, a model directory or a catalog name (pulled if missing)")
    p.add_argument("--system", help="a system prompt")
    _add_load_options(p)
    _add_sampling(p, max_tokens=1024)
    _add_pull_options(p)
    p.set_defaults(func=_chat)

    p = commands.add_parser("serve", help="serve a model as an OpenAI-compatible HTTP API")
    p.add_argument("model", nargs="?", help="a store ID or a model directory (default: the last one loaded)")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--host", default=DEFAULT_HOST, help=f"address to listen on (default {DEFAULT_HOST})")
    where.add_argument("--all-interfaces", action="store_true", help="listen on 0.0.0.0 (use an API key)")
    p.add_argument("--port", type=_port, default=DEFAULT_PORT)
    keys = p.add_mutually_exclusive_group()
    keys.add_argument("--api-key", help="require Authorization: Bearer KEY on /v1 routes")
    keys.add_argument("--api-key-file", help="read the API key from this file")
    p.add_argument("--cors-origin", action="append", default=[], metavar="ORIGIN",
                   help="let web pages from ORIGIN (e.g. http://localhost:3000; * for any) call the API; "
                        "repeatable. By default only the server's own page can")
    p.add_argument("--access-log", action="store_true", help="log a line per HTTP request")
    p.add_argument("--queue", type=int, default=0, metavar="N",
                   help="let up to N requests wait for the model, first come first served (default 0: a request "
                        "that finds the model busy gets 429 at once)")
    p.add_argument("--queue-timeout", type=float, default=DEFAULT_QUEUE_TIMEOUT, metavar="S",
                   help=f"seconds a queued request waits before it gets 429 (default {DEFAULT_QUEUE_TIMEOUT:g})")
    p.add_argument("--max-body-mb", type=_body_mb, default=DEFAULT_MAX_BODY_BYTES / 2**20,
                   help=f"largest request body in MiB (default {DEFAULT_MAX_BODY_BYTES / 2**20:g})")
    p.add_argument("--allow-file-urls", action="store_true", help="accept file:// image URLs (local files)")
    p.add_argument("--allow-pull-url", action="append", default=[], metavar="PATTERN",
                   help="let /api/pull fetch manifest URLs matching PATTERN (shell-style, e.g. "
                        "'http://192.168.1.5:8000/*'); repeatable. By default clients may pull from the hubs and "
                        "public https hosts only")
    _add_load_options(p)
    _add_pull_options(p)
    p.set_defaults(func=_serve)

    p = commands.add_parser("bench", help="measure load time, prefill/decode speed and memory on this device")
    p.add_argument("model", help="a store ID or a model directory")
    p.add_argument("--prompt-len", type=int, default=128, help="prompt tokens (default 128)")
    p.add_argument("--gen", type=int, default=128, help="generated tokens per run, end tokens ignored (default 128)")
    p.add_argument("--runs", type=int, default=5, help="measured runs (default 5)")
    p.add_argument("--tune", action="store_true",
                   help="try thread counts and MNN options; save the fastest as the model's preset")
    p.add_argument("--exact", action="store_true",
                   help="with --tune: only options that leave outputs unchanged (no KV-cache quantisation)")
    p.add_argument("--json", action="store_true")
    _add_load_options(p)
    p.set_defaults(func=_bench)

    p = commands.add_parser("generate", help="answer one prompt, streaming the reply")
    p.add_argument("model", help="a store ID or a model directory")
    p.add_argument("prompt")
    p.add_argument("--raw", action="store_true", help="use the prompt as is, without the chat template")
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--stats", action="store_true", help="print timing figures to stderr")
    p.add_argument("--json-schema", metavar="FILE", help="the answer is JSON following this JSON Schema "
                   "(needs the structured extra)")
    _add_sampling(p, max_tokens=256)
    _add_load_options(p)
    _add_pull_options(p)
    p.set_defaults(func=_generate)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except MnnEngineError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
