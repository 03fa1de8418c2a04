"""Command-line flags built from settings classes (``mnn_engine.options``):
a field ``queue_timeout`` is the flag ``--queue-timeout``, its type, range,
choices and help are the field's, and help shows the field's default, so no
flag restates what its setting declares. Older spellings stay as aliases."""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from ..errors import MnnEngineError
from ..options import Setting, refusal, settings


def flag_name(field_name: str) -> str:
    """``queue_timeout`` -> ``--queue-timeout``."""
    return "--" + field_name.replace("_", "-")


def _reader(setting: Setting, parse: Callable[[str], Any]) -> Callable[[str], Any]:
    """The flag's text as the field's type; its range is the settings' own check's
    (``invalid_argument``, as from the API), not argparse's."""
    def read(text: str) -> Any:
        try:
            return parse(text)
        except ValueError:
            raise argparse.ArgumentTypeError(refusal(setting, text)) from None
        except MnnEngineError as exc:  # a reader of its own (a duration) says what it takes
            raise argparse.ArgumentTypeError(exc.message) from None

    read.__name__ = setting.name  # argparse names the reader in its messages
    return read


def _help(setting: Setting, unset: bool) -> str:
    text = f"{setting.spec.help} (default: {setting.default_text}"
    return text + (", or the model's tuned preset" if unset else "") + ")"


def add_flags(parser: Any, cls: type, *, unset: bool = False, containers: Mapping[str, Any] | None = None) -> None:
    """A flag per declared field of ``cls``.
    ``unset``: every flag defaults to None, so only what was typed is taken
    (``given``) and the rest comes from elsewhere (a model's preset).
    ``containers``: a field's flag goes there instead (a mutually exclusive group)."""
    for setting in settings(cls):
        target = (containers or {}).get(setting.name, parser)
        names = [flag_name(setting.name), *setting.spec.aliases]
        kwargs: dict[str, Any] = {"dest": setting.name, "help": _help(setting, unset)}
        default = None if unset or setting.default is dataclasses.MISSING else setting.default
        if setting.kind is bool:
            kwargs["action"] = argparse.BooleanOptionalAction if unset or setting.default else "store_true"
            kwargs["default"] = None if unset else bool(setting.default)
        elif setting.kind is tuple:
            kwargs.update(action="append", default=None if unset else [], metavar=setting.spec.metavar)
        else:
            parse = setting.spec.parse or setting.kind
            kwargs.update(type=_reader(setting, parse), default=default, metavar=setting.spec.metavar)
            if setting.spec.choices and setting.kind is str:
                kwargs["choices"] = setting.spec.choices
        target.add_argument(*names, **kwargs)
        for old, parse in setting.spec.legacy.items():  # older flags in other units, still read
            target.add_argument(old, dest=setting.name, type=_reader(setting, parse), help=argparse.SUPPRESS)


def given(cls: type, args: argparse.Namespace) -> dict[str, Any]:
    """The values of ``cls``'s flags in ``args`` that were given (None: not given)."""
    values = {}
    for setting in settings(cls):
        value = getattr(args, setting.name, None)
        if value is not None:
            values[setting.name] = tuple(value) if setting.kind is tuple else value
    return values
