"""Command line: ``python -m mnn_engine ...``.

Human-readable output by default, ``--json`` for scripts. Errors print
``error: [code] message`` on stderr and exit with status 2 (1 for usage errors).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from .. import __version__
from ..errors import MnnEngineError
from . import chat, info, models, run, serve
from .dependencies import missing_dependency


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m mnn_engine", description="Run MNN language models.")
    parser.add_argument("--version", action="version", version=f"mnn-engine {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    models.add_commands(commands)
    info.add_commands(commands)
    chat.add_commands(commands)
    run.add_commands(commands)
    serve.add_commands(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except MnnEngineError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except ModuleNotFoundError as exc:  # e.g. tornado, when a Termux install's pip step failed offline
        missing = missing_dependency(exc)
        if missing is None:
            raise
        print(f"error: {missing}", file=sys.stderr)
        return 2
