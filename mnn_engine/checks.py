"""One way to refuse a bad argument, for every route, flag and Python call.

A refusal is ``MnnEngineError("invalid_argument")`` naming its parameter, in
one message format:

- a value of the wrong type or out of range: ``"<param>: must be <what it
  takes> (got <value>)"``, built from a ``Rule`` (``integer``, ``number``,
  ``boolean``, ``choice``, ``string``, ``obj``, ``strings`` check one value
  with one; the settings dataclasses declare theirs on their fields:
  ``mnn_engine.options``);
- anything else: ``"<param>: <reason>"`` (``invalid``).

Where a dialect's own server answers with words clients match (Ollama's
``model is required``), ``invalid(..., verbatim=True)`` keeps them as they
are. JSON has one number type and Python's ``bool`` is an ``int``: a
request's ``true`` never passes where a count is asked for (``is_int``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .errors import MnnEngineError


def is_int(value: Any) -> bool:
    """An int, not a bool."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: Any) -> bool:
    """An int or a float, not a bool (NaN and infinities included: a ``Rule`` bounds the range)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def invalid(param: str, reason: str, *, verbatim: bool = False) -> MnnEngineError:
    """The refusal of ``param``: ``"<param>: <reason>"`` (``verbatim``: the
    reason alone, where it is another server's own words)."""
    return MnnEngineError("invalid_argument", reason if verbatim else f"{param}: {reason}", param=param)


#: the longest refused value a refusal quotes
MAX_QUOTED = 80
#: what a kind of value is called in a refusal
_NOUNS = {bool: "true or false", str: "a string", dict: "a JSON object", list: "a list of strings",
          int: "an integer", float: "a number"}


@dataclass(frozen=True)
class Rule:
    """What one value may be: a kind (``bool``, ``int``, ``float``, ``str``,
    ``dict``: a JSON object, ``list``: a list of strings), an inclusive range
    (``above``: ``low`` itself is refused), choices, whether None is taken."""

    kind: type
    low: float | None = None
    high: float | None = None
    above: bool = False
    choices: tuple[Any, ...] = ()
    nullable: bool = False
    #: said after the value when it is refused (why the range is what it is)
    why: str = ""

    def said(self) -> str:
        """What the rule takes, in words ("an integer from 1 to 8", "one of low, high")."""
        if self.choices:
            said = "one of " + ", ".join(str(c) for c in self.choices)
        elif self.kind in (int, float):
            said = _NOUNS[self.kind]
            low = None if self.low is None else _shown(self.low)
            high = None if self.high is None else _shown(self.high)
            if low is not None and high is not None and not self.above:
                said += f" from {low} to {high}"
            elif low is not None:
                said += f" {'above' if self.above else 'of at least'} {low}" + \
                    (f" and at most {high}" if high is not None else "")
            elif high is not None:
                said += f" of at most {high}"
        else:
            said = _NOUNS[self.kind]
        return said + (" (or none)" if self.nullable and self.kind is not bool else "")

    def fits(self, value: Any) -> bool:
        if value is None:
            return self.nullable
        if self.kind is bool:
            return isinstance(value, bool)
        if self.kind is dict:
            return isinstance(value, Mapping)
        if self.kind is list:
            return isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value)
        if self.kind is str:
            return isinstance(value, str) and (not self.choices or value in self.choices)
        if not (is_int(value) if self.kind is int else is_number(value) and math.isfinite(value)):
            return False
        if self.choices:
            return value in self.choices
        if self.low is not None and (value <= self.low if self.above else value < self.low):
            return False
        return self.high is None or value <= self.high

    def refusal(self, value: Any) -> str | None:
        """Why ``value`` does not fit (None: it fits), without the parameter's name."""
        if self.fits(value):
            return None
        return f"must be {self.said()} (got {_quoted(value)}{'; ' + self.why if self.why else ''})"

    def check(self, value: Any, param: str) -> Any:
        """``value`` if it fits, else its refusal."""
        reason = self.refusal(value)
        if reason is not None:
            raise invalid(param, reason)
        return value


def _quoted(value: Any) -> str:
    """A refused value as its refusal quotes it: its repr, cut short (a request's whole list is not echoed)."""
    text = repr(value)
    return text if len(text) <= MAX_QUOTED else text[:MAX_QUOTED - 3] + "..."


def _shown(bound: float) -> str:
    """A bound as a refusal shows it: an int whole (a seed's 2**64 - 1), a float short."""
    return str(bound) if is_int(bound) else f"{bound:g}"


def integer(value: Any, param: str, **rule: Any) -> Any:
    """``value`` if it is an int in the range (``low``, ``high``...), else its refusal."""
    return Rule(int, **rule).check(value, param)


def number(value: Any, param: str, **rule: Any) -> Any:
    """``value`` if it is a finite number in the range, else its refusal."""
    return Rule(float, **rule).check(value, param)


def boolean(value: Any, param: str, *, nullable: bool = False) -> Any:
    """``value`` if it is true or false (or None, where taken), else its refusal."""
    return Rule(bool, nullable=nullable).check(value, param)


def choice(value: Any, param: str, choices: tuple[Any, ...], **rule: Any) -> Any:
    """``value`` if it is one of ``choices``, else its refusal."""
    kind = str if all(isinstance(c, str) for c in choices) else int
    return Rule(kind, choices=tuple(choices), **rule).check(value, param)


def string(value: Any, param: str, *, nullable: bool = False) -> Any:
    """``value`` if it is a string, else its refusal."""
    return Rule(str, nullable=nullable).check(value, param)


def obj(value: Any, param: str, *, nullable: bool = False) -> Any:
    """``value`` if it is a JSON object (a mapping), else its refusal."""
    return Rule(dict, nullable=nullable).check(value, param)


def strings(value: Any, param: str, *, nullable: bool = False) -> Any:
    """``value`` if it is a list of strings, else its refusal."""
    return Rule(list, nullable=nullable).check(value, param)
