"""``models`` and ``cache``: the model store from the command line."""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import asdict
from typing import Any

from ..checks import invalid
from ..engine.engine import model_options
from ..engine.settings import LoadOptions
from ..hub import catalog
from ..runtime.build import build_info
from ..store.adapters import AdapterInfo, split_adapter_id
from ..store.layout import ModelInfo, model_id_from_name
from ..store.models import ModelStore
from .common import (
    add_load_options,
    add_pull_options,
    command,
    human_size,
    load_overrides,
    print_json,
    progress_bar,
    show_progress,
)


def _model_line(info: ModelInfo) -> str:
    visual = "  vision" if info.is_visual else ""
    return f"{info.id:<32} {human_size(info.size_bytes):>10}  {info.name}{visual}"

def _adapter_line(info: AdapterInfo) -> str:
    shape = f"rank {info.rank}, scale {info.scale:g}" if info.rank and info.scale is not None else "LoRA"
    return f"{info.id:<32} {human_size(info.size_bytes):>10}  adapter of {info.base} ({shape})"

def _models_import(args: argparse.Namespace) -> int:
    store = ModelStore()
    progress = progress_bar() if show_progress(args) else None
    info = store.import_model(args.path, model_id=args.id, replace=args.replace, progress=progress)
    if args.json:
        print_json(info.to_dict())
    else:
        print(f"imported {info.id} ({human_size(info.size_bytes)}) into {info.path}")
    return 0

def _models_import_adapter(args: argparse.Namespace) -> int:
    info = ModelStore().import_adapter(args.path, args.base, name=args.id, replace=args.replace)
    if args.json:
        print_json(info.to_dict())
    else:
        print(f"imported adapter {info.id} ({human_size(info.size_bytes)}) over {info.base}; serve it as {info.id}")
    return 0

def _models_list(args: argparse.Namespace) -> int:
    store = ModelStore()
    models, adapters = store.list(), store.adapters()
    if args.json:
        print_json([m.to_dict() for m in models] + [{**a.to_dict(), "kind": "adapter"} for a in adapters])
    elif not models:
        print(f"no models in {store.models_dir} (add one with: python -m mnn_engine models import PATH)")
    else:
        for info in models:
            print(_model_line(info))
            for adapter in (a for a in adapters if a.base == info.id):
                print(_adapter_line(adapter))
    return 0

def _models_info(args: argparse.Namespace) -> int:
    info = ModelStore().get(args.id)
    if args.json:
        print_json(info.to_dict())
    else:
        print(f"id        {info.id}\nname      {info.name}\npath      {info.path}\n"
              f"size      {human_size(info.size_bytes)}\nvision    {'yes' if info.is_visual else 'no'}\n"
              f"created   {time.strftime('%Y-%m-%d %H:%M', time.localtime(info.created))}")
        if info.source:
            print(f"source    {info.source['source']}:{info.source['repo']} at {info.source['commit']}")
        if info.previous:
            print(f"previous  revision {info.previous['revision'] or '-'}, {human_size(info.previous['size_bytes'])} "
                  "(models rollback restores it)")
        print("files")
        for name in info.files:
            print(f"  {name}")
    return 0

def _models_pull(args: argparse.Namespace) -> int:
    store = ModelStore()
    progress = progress_bar("pulling") if show_progress(args) else None
    try:
        info = store.pull(args.spec, model_id=args.id, revision=args.revision, source=args.source,
                          update=args.update, progress=progress, base=args.base)
    except KeyboardInterrupt:  # one line, not a traceback: what was kept, and how to go on
        kept = sum(f.stat().st_size for f in (store.root / "downloads").rglob("*") if f.is_file()) \
            if (store.root / "downloads").is_dir() else 0
        print(f"\npull stopped: {human_size(kept)} kept in {store.root / 'downloads'}; pull again to resume",
              file=sys.stderr)
        return 130
    if args.json:
        print_json(info.to_dict())
    elif isinstance(info, AdapterInfo):
        print(f"{info.id}: adapter of {info.base}, {human_size(info.size_bytes)} in {info.path}")
    else:
        revision = (info.source or {}).get("commit") or "-"
        print(f"{info.id}: {human_size(info.size_bytes)} at revision {revision[:12]} in {info.path}")
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
        print_json(rows)
        return 0
    print(f"{'NAME':<20} {'PARAMS':>6} {'HF':>10} {'MODELSCOPE':>10}  (~ approximate)")
    for row in rows:
        sizes = [(("" if size["exact"] else "~") + human_size(size["bytes"])) if (size := row["sizes"].get(source))
                 else "-" for source in ("hf", "modelscope")]
        flags = " ".join(f for f, on in (("thinking", row["thinking"]), ("vision", row["vision"])) if on)
        state = "installed" if row["installed"] else "" if row["supported"] else f"needs MNN {row['min_mnn']}"
        print(f"{row['name']:<20} {row['parameters']:>6} {sizes[0]:>10} {sizes[1]:>10}  {flags:<16} {state}".rstrip())
    print(f"pull one with: python -m mnn_engine models pull NAME (this build has MNN {mnn})", file=sys.stderr)
    return 0

def _models_rollback(args: argparse.Namespace) -> int:
    info = ModelStore().rollback(args.id)
    print(f"{info.id} is back at revision {((info.source or {}).get('commit') or '-')[:12]}")
    return 0

def _models_rename(args: argparse.Namespace) -> int:
    store = ModelStore()
    adapter = store.find_adapter(args.old)
    if adapter is not None:  # an adapter: a new name over the same base (BASE_NEW, or NEW)
        new = split_adapter_id(args.new)
        renamed = store.rename_adapter(*adapter, new[1] if new and new[0] == adapter[0] else args.new)
        print(f"renamed {args.old} -> {renamed.id}")
        return 0
    info = store.rename(args.old, args.new)
    print(f"renamed {args.old} -> {info.id}")
    return 0

def _models_rm(args: argparse.Namespace) -> int:
    store = ModelStore()
    adapter = store.find_adapter(args.id)
    if adapter is not None:
        store.delete_adapter(*adapter)
    else:
        store.delete(args.id, force=args.force)
    print(f"deleted {args.id}")
    return 0

def _models_config(args: argparse.Namespace) -> int:
    """Show or change the load options stored with a model (``models config ID --threads 4``), or an
    adapter's strength (``models config BASE_NAME --scale 0.5``)."""
    store = ModelStore()
    adapter = store.find_adapter(args.id)
    if adapter is not None:
        if load_overrides(args) or args.reset:
            raise invalid("id", f"an adapter loads with its base's options: set them on the base (models config "
                                f"{adapter[0]} ...); an adapter takes --scale")
        info = store.set_adapter_scale(*adapter, args.scale) if args.scale is not None \
            else store.get_adapter(*adapter)
        if args.json:
            print_json(info.to_dict())
        else:
            print(f"{info.id}: adapter of {info.base}, scale {info.scale if info.scale is not None else 'unknown'}")
        return 0
    if args.scale is not None:
        raise invalid("scale", "--scale is an adapter's (BASE_NAME)")
    store.get(args.id)
    options = {} if args.reset else store.model_options(args.id)
    changes = load_overrides(args)
    if changes or args.reset:
        options.update(changes)
        LoadOptions().updated(options)  # refused here, not at the next load
        store.save_model_options(args.id, options)
    shown = model_options(store, args.id)
    if args.json:
        print_json({"id": args.id, "options": options, "effective": asdict(shown)})
        return 0
    if not options:
        print(f"{args.id}: no options of its own (set some with: models config {args.id} --threads N ...)")
    else:
        print(f"{args.id}: " + ", ".join(f"{k}={v}" for k, v in sorted(options.items())))
    preset = store.preset(args.id)
    if preset:
        print("preset (bench --tune, under these): " + ", ".join(f"{k}={v}" for k, v in sorted(preset.items())))
    print("loads with: " + ", ".join(f"{k}={v}" for k, v in asdict(shown).items()))
    return 0

def _cache_show(args: argparse.Namespace) -> int:
    sizes = ModelStore().cache_info(args.id)
    if args.json:
        print_json(sizes)
    elif not sizes:
        print("no caches")
    else:
        for model_id, size in sizes.items():
            print(f"{model_id:<32} {human_size(size):>10}")
    return 0

def _cache_clear(args: argparse.Namespace) -> int:
    freed = ModelStore().clear_cache(args.id)
    print(f"freed {human_size(freed)}")
    return 0

def add_commands(commands: Any) -> None:
    """Register this module's commands."""
    models = commands.add_parser("models", help="manage the model store").add_subparsers(
        dest="models_command", required=True, metavar="ACTION")
    p = command(models, "import", _models_import, "copy a model directory into the store", "path", json_output=True)
    p.add_argument("--id", help="model ID (default: the directory name, slugged)")
    p.add_argument("--replace", action="store_true", help="replace a model with the same ID")
    p.add_argument("--progress", action="store_true", help="show progress even when stderr is not a terminal")
    p = command(models, "pull", _models_pull, "download a model: a catalog name, hf:ORG/NAME, modelscope:ORG/NAME "
                 "or a manifest URL", "spec", json_output=True)
    p.add_argument("--id", help="model ID (default: the catalog name or repository name, slugged)")
    p.add_argument("--revision", help="branch, tag or commit (default: main on hf, master on modelscope)")
    add_pull_options(p)
    p.add_argument("--update", action="store_true", help="fetch the newest revision of a stored model; the "
                   "current one is kept for models rollback")
    p.add_argument("--base", help="a LoRA adapter export (lora.mnn, no config.json): the stored model it was "
                   "exported over (--id names the adapter)")
    p.add_argument("--progress", action="store_true", help="show progress even when stderr is not a terminal")
    command(models, "catalog", _models_catalog, "models you can pull by name", json_output=True)
    command(models, "rollback", _models_rollback, "go back to the version the last update replaced", "id")
    command(models, "list", _models_list, "list the models", json_output=True)
    command(models, "info", _models_info, "show one model", "id", json_output=True)
    command(models, "rename", _models_rename, "change a model's ID", "old", "new")
    p = command(models, "rm", _models_rm, "delete a model or an adapter (BASE_NAME)", "id")
    p.add_argument("--force", action="store_true", help="delete a model's adapters with it")
    p = command(models, "import-adapter", _models_import_adapter, "copy a LoRA adapter (llmexport's --lora_split "
                "export: a directory with lora.mnn) into the store, checked against the model it was exported "
                "over; it is served as BASE_NAME", "path", json_output=True)
    p.add_argument("--base", required=True, help="the stored model the adapter was exported over")
    p.add_argument("--id", help="the adapter's name (default: the directory name, slugged)")
    p.add_argument("--replace", action="store_true", help="replace an adapter of that name")
    p = command(models, "config", _models_config, "show or set the load options stored with a model (a "
                "server's on-demand load, chat, generate and serve use them; flags given there win)", "id",
                json_output=True)
    add_load_options(p)
    p.add_argument("--reset", action="store_true", help="forget the model's own options (before the ones given)")
    p.add_argument("--scale", type=float, help="an adapter's strength (lora_alpha / r at export; 0: the base's "
                   "own output): its factors are rescaled from the graph as exported")

    cache = commands.add_parser("cache", help="mmap and GPU caches").add_subparsers(
        dest="cache_command", required=True, metavar="ACTION")
    command(cache, "show", _cache_show, "cache sizes", "id?", json_output=True)
    command(cache, "clear", _cache_clear, "delete caches (the next load rebuilds them)", "id?")

