"""``POST /v1/embeddings``: OpenAI's embeddings, from a loaded text-embedding
model. ``input`` is a text, token ids, or a list of either (a batch, answered
in order); ``encoding_format`` ``float`` or ``base64`` (little-endian
float32, as OpenAI's client decodes it); ``dimensions`` keeps the first N
values and scales them back to unit length (for Matryoshka-trained models such
as Qwen3-Embedding). A chat model answers 400 ``wrong_model_kind``."""

from __future__ import annotations

import base64
import math
import struct
from collections.abc import Mapping
from typing import Any

from ..api.openai_chat import bad
from .app import BodyHandler


def dimensions_field(body: Mapping[str, Any]) -> int | None:
    """The optional ``dimensions`` field (both dialects): a positive integer."""
    dimensions = body.get("dimensions")
    if dimensions is not None and (isinstance(dimensions, bool) or not isinstance(dimensions, int)
                                   or dimensions < 1):
        raise bad("dimensions", "'dimensions' must be a positive integer")
    return dimensions


def shortened(vector: list[float], dimensions: int) -> list[float]:
    """The first ``dimensions`` values, scaled back to unit length."""
    head = vector[:dimensions]
    norm = math.sqrt(math.fsum(v * v for v in head))
    return [v / norm for v in head] if norm > 0 else head


def encode_base64(vector: list[float]) -> str:
    return base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode("ascii")


class EmbeddingsHandler(BodyHandler):
    async def post(self) -> None:
        body = self.parse_body()
        if not isinstance(body, Mapping):
            raise bad("body", "the request body must be a JSON object")
        if "input" not in body:
            raise bad("input", "'input' is required")
        encoding = body.get("encoding_format", "float")
        if encoding not in ("float", "base64"):
            raise bad("encoding_format", "'encoding_format' must be 'float' or 'base64'")
        dimensions = dimensions_field(body)
        model = self.require_model()
        llm = self.ctx.engine.llm
        if dimensions is not None and llm.kind == "embedding" and dimensions > llm.embedding_dim:
            raise bad("dimensions", f"the model's embeddings have {llm.embedding_dim} dimensions "
                                    f"(asked for {dimensions})")
        result = await self.embed(body["input"])
        data = []
        for index, vector in enumerate(result.vectors):
            if dimensions is not None and dimensions < len(vector):
                vector = shortened(vector, dimensions)
            data.append({"object": "embedding", "index": index,
                         "embedding": encode_base64(vector) if encoding == "base64" else vector})
        self.send_json({"object": "list", "data": data, "model": model,
                        "usage": {"prompt_tokens": result.prompt_tokens, "total_tokens": result.prompt_tokens}})
