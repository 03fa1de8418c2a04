"""Embeddings in both dialects' terms: the ``dimensions`` field, shortening
a vector back to unit length, OpenAI's base64 encoding. No Tornado, no Engine."""

from __future__ import annotations

import base64
import math
import struct
from collections.abc import Mapping
from typing import Any

from ..checks import integer


def dimensions_field(body: Mapping[str, Any]) -> int | None:
    """The optional ``dimensions`` field (both dialects): a positive integer."""
    return integer(body.get("dimensions"), "dimensions", low=1, nullable=True)


def shortened(vector: list[float], dimensions: int) -> list[float]:
    """The first ``dimensions`` values, scaled back to unit length."""
    head = vector[:dimensions]
    norm = math.sqrt(math.fsum(v * v for v in head))
    return [v / norm for v in head] if norm > 0 else head


def encode_base64(vector: list[float]) -> str:
    return base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode("ascii")
