"""Fast JSON where orjson is installed (it is optional: Termux has no
package for it), the standard library otherwise. Same results either way,
but for integers beyond 64 bits, which orjson reads as floats: every integer
field refuses both (tests/test_jsonutil.py)."""

from __future__ import annotations

import json
from typing import Any

try:  # pragma: no cover - depends on the environment
    import orjson
except ImportError:  # pragma: no cover
    orjson = None

BACKEND = "orjson" if orjson is not None else "json"


def dumps(data: Any) -> bytes:
    """UTF-8 JSON bytes, non-ASCII kept as is."""
    if orjson is not None:
        return orjson.dumps(data)
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()


def loads(text: str | bytes) -> Any:
    """Parse JSON; raises ValueError on bad input (NaN and Infinity refused),
    RecursionError on input nested too deeply for the standard library."""
    if orjson is not None:
        try:
            return orjson.loads(text)
        except orjson.JSONDecodeError:
            # orjson refuses some valid JSON: escaped lone surrogates ("\ud800", which RFC 8259 admits and
            # the field checks then name) and nesting past 1,024 levels. The standard library decides,
            # so both backends give the same result, and bad input is only parsed twice.
            pass
    return json.loads(text, parse_constant=_refuse)


def depth(value: Any, limit: int) -> int:
    """Nesting depth of a parsed JSON value, counted up to ``limit + 1`` (iterative)."""
    deepest = 0
    stack = [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, (dict, list)):
            deepest = max(deepest, level)
            if level > limit:
                return level
            stack.extend((child, level + 1) for child in (item.values() if isinstance(item, dict) else item))
    return deepest


def _refuse(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")
