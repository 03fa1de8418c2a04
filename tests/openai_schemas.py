"""OpenAI's own JSON schemas for what the OpenAI routes answer, vendored from
the MIT-licensed openai/openai-openapi document (``tests/schemas/
openai_components.json``: its commit is inside; ``tools/openapi/
vendor_openai_schemas.py`` makes it). ``check(path, status, body, streamed)``
names the schema that fits an answer and returns what does not match it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

DOCUMENT = json.loads((Path(__file__).parent / "schemas" / "openai_components.json").read_text())
_REGISTRY = Registry().with_resource("urn:openai", Resource.from_contents(
    {"components": DOCUMENT["components"]}, default_specification=DRAFT202012))
_VALIDATORS: dict[str, Draft202012Validator] = {}


def violations(schema: str, instance: Any) -> list[str]:
    """What of ``instance`` does not fit OpenAI's component schema ``schema``."""
    validator = _VALIDATORS.get(schema)
    if validator is None:
        validator = _VALIDATORS[schema] = Draft202012Validator(
            {"$ref": f"urn:openai#/components/schemas/{schema}"}, registry=_REGISTRY)
    return [f"{schema} at /{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(instance)]


def schema_for(path: str, status: int, streamed: bool) -> str | None:
    """The schema an answer of an OpenAI route must fit (None: not an OpenAI route or answer)."""
    if not path.startswith("/v1/") or path.startswith("/v1/messages"):
        return None  # /v1/messages: Anthropic's dialect (tests/anthropic_types.py)
    if status >= 400:
        return "ErrorResponse"
    if path == "/v1/responses" or (path.startswith("/v1/responses/") and path.count("/") == 3):
        return "ResponseStreamEvent" if streamed else "Response"
    if path.startswith("/v1/responses/") and path.endswith("/input_items"):
        return "ResponseItemList"
    if path == "/v1/chat/completions":
        return "CreateChatCompletionStreamResponse" if streamed else "CreateChatCompletionResponse"
    return {"/v1/completions": "CreateCompletionResponse", "/v1/embeddings": "CreateEmbeddingResponse",
            "/v1/models": "ListModelsResponse"}.get(path, "Model" if path.startswith("/v1/models/") else None)


def check(path: str, status: int, body: Any, streamed: bool = False) -> list[str]:
    """What of an answer (its JSON) does not fit the schema of its route."""
    if streamed and isinstance(body, dict) and "error" in body:
        return violations("ErrorResponse", body)  # a failure after the stream started
    schema = schema_for(path, status, streamed)
    if schema is None:
        return []
    if schema == "Response" and isinstance(body, dict) and body.get("deleted") is True:
        # DELETE /v1/responses/{id}: the document gives its answer no schema; the API's is exactly this
        return [] if set(body) == {"id", "object", "deleted"} and body["object"] == "response" else [f"{body}"]
    return violations(schema, _as_the_document_describes(path, body, streamed))


def _as_the_document_describes(path: str, body: Any, streamed: bool) -> Any:
    """The answers the document describes by another shape than the API sends them:
    - legacy completions streamed: the API sends CreateCompletionResponse chunks with
      ``finish_reason: null`` until the last (the document only has the non-streamed object,
      whose finish_reason is required);
    - legacy completions with ``echo`` and ``logprobs``: the echoed prompt's first token has no
      log-probability, and the API gave ``null`` there in ``token_logprobs`` and ``top_logprobs``
      (lm-eval's ``local-completions`` reads from the context's length on for that reason,
      lm_eval/models/openai_completions.py; the document types numbers only): that first entry
      only is checked as a number;
    - embeddings with ``encoding_format: base64``: ``embedding`` is the base64 string of
      little-endian float32s (the document only types the float list).
    Each is checked as the object the document describes, the rest of it unchanged."""
    if not isinstance(body, dict):
        return body
    if path == "/v1/completions" and isinstance(body.get("choices"), list):
        choices = [_first_logprob_filled(dict(c, finish_reason=c.get("finish_reason") or "stop") if streamed else c)
                   if isinstance(c, dict) else c for c in body["choices"]]
        return {**body, "choices": choices}
    if path == "/v1/embeddings" and isinstance(body.get("data"), list):
        data = [dict(d, embedding=_floats(d["embedding"])) if isinstance(d, dict) and
                isinstance(d.get("embedding"), str) else d for d in body["data"]]
        return {**body, "data": data}
    return body


def _first_logprob_filled(choice: dict[str, Any]) -> dict[str, Any]:
    logprobs = choice.get("logprobs")
    if not isinstance(logprobs, dict) or not logprobs.get("token_logprobs"):
        return choice
    if logprobs["token_logprobs"][0] is not None:
        return choice
    filled = {**logprobs, "token_logprobs": [0.0, *logprobs["token_logprobs"][1:]]}
    if logprobs.get("top_logprobs") and logprobs["top_logprobs"][0] is None:
        filled["top_logprobs"] = [{}, *logprobs["top_logprobs"][1:]]
    return {**choice, "logprobs": filled}


def _floats(encoded: str) -> Any:
    import base64
    import struct

    raw = base64.b64decode(encoded)
    return list(struct.unpack(f"<{len(raw) // 4}f", raw)) if len(raw) % 4 == 0 else encoded
