"""``POST /v1/embeddings``: OpenAI's embeddings, from a loaded text-embedding
model. ``input`` is a text, token ids, or a list of either (a batch, answered
in order); ``encoding_format`` ``float`` or ``base64`` (little-endian
float32, as OpenAI's client decodes it); ``dimensions`` keeps the first N
values and scales them back to unit length (for Matryoshka-trained models such
as Qwen3-Embedding). A chat model answers 400 ``wrong_model_kind``."""

from __future__ import annotations

from typing import Any

from ..api.embeddings import dimensions_field, encode_base64, shortened
from ..checks import choice, invalid, obj
from .app import BodyHandler


class EmbeddingsHandler(BodyHandler):
    async def post(self) -> None:
        body = self.parse_body()
        obj(body, "body")
        if "input" not in body:
            raise invalid("input", "is required")
        encoding = choice(body.get("encoding_format", "float"), "encoding_format", ("float", "base64"))
        dimensions = dimensions_field(body)
        model = self.choose_model(body)

        def check(llm: Any) -> None:
            if dimensions is not None and llm.kind == "embedding" and dimensions > llm.embedding_dim:
                raise invalid("dimensions", f"the model's embeddings have {llm.embedding_dim} dimensions "
                                              f"(asked for {dimensions})")

        result = await self.embed(body["input"], check=check)
        data = []
        for index, vector in enumerate(result.vectors):
            if dimensions is not None and dimensions < len(vector):
                vector = shortened(vector, dimensions)
            data.append({"object": "embedding", "index": index,
                         "embedding": encode_base64(vector) if encoding == "base64" else vector})
        self.send_json({"object": "list", "data": data, "model": model,
                        "usage": {"prompt_tokens": result.prompt_tokens, "total_tokens": result.prompt_tokens}})
