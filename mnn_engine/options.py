"""Settings fields that describe themselves: a field's default, type, range,
choices and one-line help are declared once, on the dataclass (``option``);
``check`` refuses a value outside them with one message format, and the CLI
builds its flags from the same declaration (``mnn_engine.cli.flags``).

The type comes from the field's annotation (``int | None``, ``tuple[str, ...]``,
``bool``...), so it is written once too. Values with a reader of their own
live here as well: durations as Ollama reads them (``keep_alive``), shared by
the Ollama dialect's requests and ``serve --keep-alive``."""

from __future__ import annotations

import dataclasses
import functools
import math
import re
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from .checks import Rule, invalid, is_number

_KEY = "mnn_engine.option"


@dataclass(frozen=True)
class Spec:
    """What a settings field accepts, and how its flag reads."""

    help: str
    #: the inclusive bounds of a number (``above``: ``low`` itself is refused)
    low: float | None = None
    high: float | None = None
    above: bool = False
    choices: tuple[Any, ...] = ()
    #: said after the choices or range when a value is refused (why the others are not offered)
    why: str = ""
    #: the default as help shows it, where the field's default is computed (``default_factory``)
    default_text: str | None = None
    metavar: str | None = None
    #: other spellings of the flag (an older name), read the same way
    aliases: tuple[str, ...] = ()
    #: older flags read in other units: flag -> function from its text to this field's value
    legacy: Mapping[str, Callable[[str], Any]] = dataclasses.field(default_factory=dict)
    #: the flag's reader, where the value is not a plain int/float/str (a duration, a size)
    parse: Callable[[str], Any] | None = None


def option(default: Any = dataclasses.MISSING, *, help: str,
           default_factory: Any = dataclasses.MISSING, **spec: Any) -> Any:
    """A dataclass field with its ``Spec`` (``help``, range, choices...)."""
    return dataclasses.field(default=default, default_factory=default_factory,
                             metadata={_KEY: Spec(help=help, **spec)})


@dataclass(frozen=True)
class Setting:
    """One declared field of a settings class, its type resolved."""

    name: str
    kind: type  # bool, int, float, str or tuple (of strings)
    nullable: bool
    default: Any  # dataclasses.MISSING where a factory computes it
    spec: Spec

    @property
    def default_text(self) -> str:
        if self.spec.default_text is not None:
            return self.spec.default_text
        if self.default is None or self.default == ():
            return "none"
        if isinstance(self.default, bool):
            return "on" if self.default else "off"
        return f"{self.default:g}" if isinstance(self.default, float) else str(self.default)

    @property
    def rule(self) -> Rule:
        """What the field takes (``checks.Rule``: the one refusal format)."""
        spec = self.spec
        return Rule(list if self.kind is tuple else self.kind, spec.low, spec.high, spec.above, spec.choices,
                    self.nullable, spec.why)


def _resolve(hint: Any) -> tuple[type, bool]:
    nullable = False
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        nullable = len(args) < len(typing.get_args(hint))
        [hint] = args
    if typing.get_origin(hint) is tuple:
        return tuple, nullable
    if hint not in (bool, int, float, str):
        raise TypeError(f"a settings field of type {hint!r} has no flag form")
    return hint, nullable


@functools.cache
def settings(cls: type) -> tuple[Setting, ...]:
    """The fields of ``cls`` declared with ``option``, in their order (resolved once per class)."""
    hints = typing.get_type_hints(cls)
    found = []
    for f in dataclasses.fields(cls):
        spec = f.metadata.get(_KEY)
        if spec is None:
            continue
        kind, nullable = _resolve(hints[f.name])
        found.append(Setting(f.name, kind, nullable, f.default, spec))
    return tuple(found)


def refusal(setting: Setting, value: Any) -> str | None:
    """Why ``value`` does not fit the setting (None: it fits), in the one format every check uses."""
    return setting.rule.refusal(value)


def check(instance: Any) -> None:
    """``invalid_argument`` naming the first declared field of ``instance`` whose value does not fit."""
    for setting in settings(type(instance)):
        setting.rule.check(getattr(instance, setting.name), setting.name)


# ---------------------------------------------------------------- durations
#: Go's time.ParseDuration units, in seconds (Ollama's keep_alive strings are Go durations)
_GO_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_GO_DURATION = re.compile(r"([0-9]*\.?[0-9]*)(ns|us|µs|μs|ms|s|m|h)")


def go_duration_seconds(text: str) -> float:
    """Go's ``time.ParseDuration`` ("5m", "1h30m", "-1m", "0", "1.5s"), in
    seconds; ``ValueError`` for anything Go refuses (a bare "300" too)."""
    body = text[1:] if text[:1] in "+-" else text
    if body == "0":
        return 0.0
    total, at = 0.0, 0
    while at < len(body):
        match = _GO_DURATION.match(body, at)
        if match is None or match.group(1) in ("", "."):
            raise ValueError(f"time: invalid duration {text!r}")
        total += float(match.group(1)) * _GO_UNITS[match.group(2)]
        at = match.end()
    if not body:
        raise ValueError(f"time: invalid duration {text!r}")
    return -total if text.startswith("-") else total


def keep_alive_seconds(value: Any) -> float | None:
    """A keep-alive as api/types.go's ``Duration.UnmarshalJSON`` reads it: a
    number of seconds or a Go duration string (``"5m"``; a bare ``"300"`` is
    refused, as Go refuses it); negative: forever (None)."""
    if isinstance(value, str):
        try:
            seconds = go_duration_seconds(value)
        except ValueError as exc:
            raise invalid("keep_alive", f"{exc} (a duration such as \"5m\", or seconds)") from exc
    elif is_number(value):
        seconds = float(value)
    else:
        raise invalid("keep_alive", f"Unsupported type: '{type(value).__name__}'")
    if math.isnan(seconds):
        raise invalid("keep_alive", "is not a number")
    return None if seconds < 0 or math.isinf(seconds) else seconds


def keep_alive_flag(text: str) -> float | None:
    """``--keep-alive``: seconds ("300") or a duration as a request's ``keep_alive``
    takes it ("5m", "1h"; negative: forever), in seconds (None: forever)."""
    try:
        value: float | str = float(text)
    except ValueError:
        value = text
    return keep_alive_seconds(value)
