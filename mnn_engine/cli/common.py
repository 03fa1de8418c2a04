"""What the commands share: output, progress, the load, pull and sampling options."""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..engine.settings import LoadOptions
from ..errors import MnnEngineError
from ..hub import catalog
from ..store.models import ModelStore
from .flags import add_flags, given


def print_json(data: Any) -> None:
    print(json.dumps(data, indent=2, ensure_ascii=False))

def human_size(n: float) -> str:
    """Bytes in IEC units (KiB, MiB, GiB), as everywhere in mnn-engine."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"

def progress_bar(verb: str = "importing", stream=sys.stderr) -> Callable[[int, int, str], None]:
    """A one-line bar with the speed (over this run's bytes) and the time left:
    redrawn at most ten times a second, 100 % only once everything is there,
    and its last line ended once."""
    start = time.monotonic()
    last = [0.0]
    first: list[int] = []
    ended = [False]

    def show(done: int, total: int, _name: str) -> None:
        now = time.monotonic()
        if not first:
            first.append(done)  # bytes a resumed pull already had do not count for the speed
        if ended[0] or (done < total and now - last[0] < 0.1):
            return
        last[0] = now
        fraction = done / total if total else 1.0
        filled = int(fraction * 30)
        percent = int(fraction * 100) if done < total else 100  # 99.6 % is not shown as 100 %
        speed = (done - first[0]) / max(now - start, 1e-3)
        eta = f" {(total - done) / speed:4.0f} s left" if speed > 0 and done < total else ""
        stream.write(f"\r{verb} [{'#' * filled}{'.' * (30 - filled)}] {percent:3d}% "
                     f"{human_size(done)} / {human_size(total)}  {human_size(int(speed))}/s{eta}   ")
        if done >= total:
            stream.write("\n")
            ended[0] = True
        stream.flush()

    return show

def show_progress(args: argparse.Namespace) -> bool:
    return not getattr(args, "json", False) and (sys.stderr.isatty() or getattr(args, "progress", False))

def load_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The load options given on the command line (the rest come from the model's preset)."""
    return given(LoadOptions, args)

def pull_if_missing(args: argparse.Namespace) -> None:
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
        size = entry.size(source)
        answer = input(f"{name} is not in the store. Pull it from {where} ({entry.repo(source)}, "
                       f"{'' if size.exact else 'about '}{human_size(size.bytes)})? [Y/n] ")
        if answer.strip().lower() not in ("", "y", "yes"):
            raise MnnEngineError("model_not_found", f"{name} is not in the store (pull it with: "
                                 f"python -m mnn_engine models pull {name})", param="model")
    info = store.pull(name, source=args.source, progress=progress_bar("pulling") if sys.stderr.isatty() else None)
    args.model = info.id

def add_load_options(parser: argparse.ArgumentParser) -> None:
    """``LoadOptions``' flags; each one not given comes from the model's tuned preset, else the default."""
    add_flags(parser, LoadOptions, unset=True)

def add_url_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--url", metavar="URL", help="use the model of the server running at URL (e.g. "
                        "http://127.0.0.1:8081) instead of loading one here; its API key from MNN_ENGINE_API_KEY")

def add_pull_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--yes", action="store_true", help="pull a catalog model that is not in the store "
                        "without asking")
    parser.add_argument("--source", choices=("hf", "modelscope"), default=None,
                        help="where a catalog model is pulled from (default hf)")

def add_sampling(parser: argparse.ArgumentParser, max_tokens: int) -> None:
    parser.add_argument("--max-tokens", type=int, default=max_tokens)
    parser.add_argument("--temperature", type=float, default=None, help="default: the model's own")
    parser.add_argument("--think", action=argparse.BooleanOptionalAction, default=None,
                        help="turn a thinking model's reasoning on or off")

def command(group: Any, name: str, func: Callable[[argparse.Namespace], int], help_text: str,
             *positional: str, json_output: bool = False) -> argparse.ArgumentParser:
    """A sub-command with its positional arguments (``name?`` = optional) and ``--json``."""
    p = group.add_parser(name, help=help_text)
    for arg in positional:
        p.add_argument(arg.rstrip("?"), nargs="?" if arg.endswith("?") else None)
    if json_output:
        p.add_argument("--json", action="store_true")
    p.set_defaults(func=func)
    return p


def add_raw_output_option(parser: argparse.ArgumentParser) -> None:
    """``--raw-output``: a model's text to the terminal as it came (``cli.terminal``)."""
    parser.add_argument("--raw-output", action="store_true",
                        help="write the model's text to the terminal as it came, control sequences included "
                             "(by default a terminal is shown them as \\x1b ...)")
