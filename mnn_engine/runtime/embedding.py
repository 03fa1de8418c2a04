"""Text embeddings: the inputs an embedding model takes and the vectors it gives.

An embedding model is an MNN model whose graph outputs ``sentence_embeddings``
(llmexport exports Qwen3-Embedding, BGE and GTE models so); ``Llm.embed`` runs
it. Each input is one forward from an empty KV cache, so its vector does not
depend on the other inputs of a batch.
"""

from __future__ import annotations

import array
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

from ..checks import invalid, is_int
from ..errors import MnnEngineError

#: Most inputs one call takes (OpenAI's limit for /v1/embeddings).
MAX_INPUTS = 2048

# llmexport writes an embedding model's template as PREFIX{{ messages | map(attribute='content') | join('') }}SUFFIX
# (e.g. "...<|endoftext|>" for Qwen3, "[CLS]...[SEP]" for BGE). MNN 3.6.1's template engine renders that
# expression as a JSON list ('["text"]'), so the text is wrapped here instead.
_CONTENT_JOIN = re.compile(
    r"\{\{-?\s*messages\s*\|\s*map\(\s*attribute\s*=\s*['\"]content['\"]\s*\)\s*\|\s*join\(\s*(?:''|\"\")\s*\)\s*-?\}\}")

EmbeddingInput = str | list[int]


@dataclass(frozen=True)
class EmbeddingResult:
    """One vector per input, in input order, and the tokens they took."""

    vectors: list[list[float]]
    prompt_tokens: int

    @property
    def dim(self) -> int:
        return len(self.vectors[0]) if self.vectors else 0


def template_wrap(chat_template: str | None) -> tuple[str, str] | None:
    """(prefix, suffix) around the text, for llmexport's embedding templates;
    None for any other template (MNN then renders it)."""
    if not chat_template:
        return None
    parts = _CONTENT_JOIN.split(chat_template)
    if len(parts) != 2 or any("{{" in p or "{%" in p for p in parts):
        return None
    return parts[0], parts[1]


def embedding_inputs(value: object, param: str = "input") -> list[EmbeddingInput]:
    """The inputs of one call, as OpenAI takes them: a text, a list of token
    ids, a list of texts or a list of token-id lists. Empty texts and lists
    are refused (an empty input has no embedding)."""
    if isinstance(value, str):
        items: list[object] = [value]
    elif isinstance(value, Sequence) and not isinstance(value, (bytes, bytearray)):
        if not value:
            raise invalid(param, "must not be empty")
        items = [list(value)] if all(_is_id(v) for v in value) else list(value)
    else:
        raise invalid(param, "must be a string, a list of strings, a list of token ids or a list of such lists")
    if len(items) > MAX_INPUTS:
        raise invalid(param, f"at most {MAX_INPUTS} inputs per request (got {len(items)})")
    checked: list[EmbeddingInput] = []
    for i, item in enumerate(items):
        where = param if len(items) == 1 else f"{param}[{i}]"
        if isinstance(item, str):
            if not item:
                raise MnnEngineError("empty_prompt", f"{where} is an empty string", param=param)
            checked.append(item)
        elif isinstance(item, Sequence) and not isinstance(item, (bytes, bytearray)):
            ids = list(item)
            if not ids:
                raise MnnEngineError("empty_prompt", f"{where} is an empty list of token ids", param=param)
            if not all(_is_id(v) for v in ids):
                raise invalid(param, f"{where}: token ids must be integers")
            checked.append(ids)
        else:
            raise invalid(param, f"{where} must be a string or a list of token ids")
    return checked


def _is_id(value: object) -> bool:
    return is_int(value)


def vector_from(raw: bytes, normalize: bool) -> list[float]:
    """float32 bytes from the engine as floats, scaled to unit length when
    ``normalize`` (as OpenAI's and Ollama's embeddings are; a zero vector
    stays zero)."""
    values = array.array("f", raw)
    if normalize:
        norm = math.sqrt(math.fsum(v * v for v in values))
        if norm > 0 and math.isfinite(norm):
            values = array.array("f", (v / norm for v in values))
    return values.tolist()
