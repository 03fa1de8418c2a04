"""Fast JSON where orjson is installed (it is optional: Termux has no
package for it), the standard library otherwise. Same results either way."""

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
    """Parse JSON; raises ValueError on bad input (NaN and Infinity refused)."""
    if orjson is not None:
        return orjson.loads(text)
    return json.loads(text, parse_constant=_refuse)


def _refuse(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")
