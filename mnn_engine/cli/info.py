"""``info`` and ``backends``: how this installation was built and what it can use."""

from __future__ import annotations

import argparse
from typing import Any

from .. import jsonutil
from ..runtime.build import backend_capabilities, build_info
from ..store.models import ModelStore
from .common import (
    command,
    print_json,
)


def _backends(args: argparse.Namespace) -> int:
    caps = backend_capabilities()
    if args.json:
        print_json(caps)
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
        print_json(info)
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

def add_commands(commands: Any) -> None:
    """Register this module's commands."""
    command(commands, "info", _info, "how this installation was built (provenance) and what it can use",
             json_output=True)
    command(commands, "backends", _backends, "which backends are compiled in and available", json_output=True)


