"""``chat``: a conversation at the terminal, with the few commands a REPL
has (``/help``, ``/reset``, ``/system``, ``/save``, ``/stats``)."""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .. import config
from ..checks import invalid
from ..engine.engine import Engine
from ..errors import MnnEngineError
from ..runtime.generation import GenerationResult
from ..store.models import ModelStore
from .common import (
    add_load_options,
    add_pull_options,
    add_raw_output_option,
    add_sampling,
    add_url_option,
    load_overrides,
    pull_if_missing,
)
from .remote import RemoteEngine
from .terminal import text_writer

HELP = """commands:
  /help           this list
  /reset          a new conversation (the system prompt stays)
  /system TEXT    set the system prompt (/system alone clears it); starts a new conversation
  /save FILE      write the conversation to FILE as JSON (the messages, as the API takes them)
  /stats [on|off] the last answer's figures; on/off: after every answer
  /exit           quit (so does Ctrl-D)
Ctrl-C stops an answer; a line that starts with // sends one starting with /."""


def _line_history(store: ModelStore, model_id: str | None) -> Callable[[], None]:
    """Line editing and a per-model input history (stdlib readline, where
    the platform has it); returns what saves the history."""
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


def loaded_line(engine: Engine) -> str:
    """What loaded, and how: "loaded NAME (cpu, 4 threads, context 4096 tokens)"."""
    model = engine.snapshot()["model"]
    options = model["options"] or {}
    name = model["id"] or model["path"]
    threads = options.get("threads")
    how = [options.get("backend") or "cpu", f"{threads} thread{'s' if threads != 1 else ''}" if threads else "",
           f"context {model['context_length']} tokens" if model.get("context_length") else "",
           "speculative decoding" if model.get("speculative") not in (None, "off") else ""]
    return f"loaded {name} ({', '.join(h for h in how if h)})"


def stats_line(result: GenerationResult) -> str:
    """One answer's figures, as ``/stats`` prints them."""
    return (f"[{result.completion_tokens} tokens, {result.decode_tokens_per_second:.1f} tok/s; prompt "
            f"{result.prompt_tokens} tokens at {result.prefill_tokens_per_second:.1f} tok/s, first token after "
            f"{result.time_to_first_token_ms:.0f} ms; {result.finish_reason}]")


class ChatSession:
    """The conversation and its commands, apart from the terminal's input
    and output so that each command is one method."""

    def __init__(self, engine: Engine | RemoteEngine, system: str | None, sampling: dict[str, Any]) -> None:
        self.engine = engine
        self.system = system or None
        self.sampling = sampling
        self.messages: list[dict[str, str]] = []
        self.show_stats = False
        self.reset()

    def reset(self) -> None:
        self.messages = [{"role": "system", "content": self.system}] if self.system else []

    def command(self, line: str) -> str | None:
        """Run a ``/command``; returns what to print, or None to quit."""
        name, _, rest = line[1:].partition(" ")
        rest = rest.strip()
        if name in ("exit", "quit", "bye"):
            return None
        if name in ("help", "?"):
            return HELP
        if name in ("reset", "clear", "new"):
            self.reset()
            return "[a new conversation]"
        if name == "system":
            self.system = rest or None
            self.reset()
            return f"[system prompt {'set' if rest else 'cleared'}; a new conversation]"
        if name == "save":
            if not rest:
                return "[/save needs a file name: /save FILE]"
            path = Path(rest).expanduser()
            try:
                path.write_text(json.dumps({"messages": self.messages}, ensure_ascii=False, indent=1) + "\n")
            except OSError as exc:
                return f"[could not save to {path}: {exc.strerror or exc}]"
            return f"[saved {len(self.messages)} messages to {path}]"
        if name == "stats":
            if rest in ("on", "off"):
                self.show_stats = rest == "on"
                return f"[figures after every answer: {rest}]"
            result = self.engine.last_result
            return stats_line(result) if result is not None else "[no answer yet]"
        return f"[unknown command /{name}; /help lists them]"

    def answer(self, text: str, write: Callable[[str], Any]) -> str:
        """Send ``text`` and stream the reply through ``write``; Ctrl-C stops
        it and keeps what was written. Returns notes to print after it."""
        self.messages.append({"role": "user", "content": text})
        reply: list[str] = []
        try:
            for piece in self.engine.stream_chat(self.messages, context_overflow="truncate", **self.sampling):
                reply.append(piece)
                write(piece)
        except KeyboardInterrupt:
            write(" [stopped]")
        except MnnEngineError:
            if not reply:  # nothing answered: the question is not left alone in the conversation
                self.messages.pop()
            else:
                self.messages.append({"role": "assistant", "content": "".join(reply)})
            raise
        write("\n")
        self.messages.append({"role": "assistant", "content": "".join(reply)})
        notes = []
        result = self.engine.last_result
        dropped = result.dropped_messages if result is not None else 0
        if dropped:  # the conversation outgrew the context: its oldest turns are gone for good
            first = 1 if self.system else 0
            del self.messages[first:first + dropped]
            notes.append(f"[the {dropped} oldest messages no longer fit the context and were left out]")
        if self.show_stats and result is not None:
            notes.append(stats_line(result))
        return "\n".join(notes)


def _engine(args: argparse.Namespace) -> tuple[Any, str, str | None]:
    """The model to talk to: a running server's (``--url``), else loaded
    here; with what to print and the history's name."""
    if args.url:
        remote = RemoteEngine(args.url, args.model, api_key=config.api_key())
        return remote, remote.describe(), args.model or "server"
    if not args.model:
        raise invalid("model", "name a MODEL, or a running server with --url URL")
    pull_if_missing(args)
    engine = Engine()
    try:
        engine.load(args.model, **load_overrides(args))
    except BaseException:
        engine.close()
        raise
    return engine, loaded_line(engine), engine.active_model_id


def _chat(args: argparse.Namespace) -> int:
    engine, shown, history = _engine(args)
    try:
        save_history = _line_history(ModelStore(), history)
        session = ChatSession(engine, args.system, {"max_tokens": args.max_tokens, "temperature": args.temperature,
                                                    "enable_thinking": args.think})
        print(shown, file=sys.stderr)
        print("Type a message; /help lists the commands, Ctrl-C stops an answer, Ctrl-D quits.", file=sys.stderr)

        write = text_writer(sys.stdout, raw=args.raw_output)
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
            if text.startswith("/") and not text.startswith("//"):
                shown = session.command(text.strip())
                if shown is None:
                    return 0
                print(shown, file=sys.stderr)
                continue
            try:
                notes = session.answer(text[1:] if text.startswith("//") else text, write)
            except MnnEngineError as exc:
                print(f"\n[{exc.code}] {exc.message}", file=sys.stderr)
                continue
            save_history()
            if notes:
                print(notes, file=sys.stderr)
    finally:
        engine.close()


def add_commands(commands: Any) -> None:
    """Register ``chat``."""
    p = commands.add_parser("chat", help="chat with a model in the terminal (/help lists its commands)")
    p.add_argument("model", nargs="?", help="a store ID, a model directory or a catalog name (pulled if missing); "
                   "with --url, the name the server serves (default: its default model)")
    add_url_option(p)
    p.add_argument("--system", help="a system prompt")
    add_load_options(p)
    add_sampling(p, max_tokens=1024)
    add_pull_options(p)
    add_raw_output_option(p)
    p.set_defaults(func=_chat)
