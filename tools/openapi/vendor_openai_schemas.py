#!/usr/bin/env python3
"""Vendor the OpenAI response schemas the suite validates against.

Usage: python tools/openapi/vendor_openai_schemas.py OPENAPI_JSON COMMIT

OPENAPI_JSON is ``openapi.json`` of github.com/openai/openai-openapi (MIT
licensed) at COMMIT. The schemas the suite's responses must match (chat
completions, their chunks, completions, embeddings, models, errors, responses
and their stream events) are
written with every schema they reference, and without descriptions and
examples, to ``tests/schemas/openai_components.json``, with the source,
commit and licence beside them. The tests resolve the ``$ref``s with
``jsonschema`` (``tests/openai_schemas.py``).
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

#: what the server answers, in OpenAI's names
ROOTS = ["CreateChatCompletionResponse", "CreateChatCompletionStreamResponse", "CreateCompletionResponse",
         "CreateEmbeddingResponse", "Model", "ListModelsResponse", "ErrorResponse",
         # the Responses API: a response, its stream events, the input items of a stored one
         "Response", "ResponseStreamEvent", "ResponseItemList"]
OUT = Path(__file__).resolve().parents[2] / "tests" / "schemas" / "openai_components.json"
_DROPPED = {"description", "example", "examples", "title"}


def _stripped(value: Any) -> Any:
    if isinstance(value, dict):
        out = {k: _stripped(v) for k, v in value.items() if k not in _DROPPED and not k.startswith("x-")}
        # The document is OpenAPI 3.1 (JSON Schema 2020-12) but still marks some fields with 3.0's
        # "nullable", which JSON Schema ignores: say what it means, that null is allowed too.
        if out.pop("nullable", False):
            out = {"anyOf": [out, {"type": "null"}]}
        return out
    if isinstance(value, list):
        return [_stripped(v) for v in value]
    return value


def main(openapi: Path, commit: str) -> None:
    schemas = json.loads(openapi.read_text())["components"]["schemas"]
    wanted: set[str] = set()
    stack = list(ROOTS)
    while stack:
        name = stack.pop()
        if name not in wanted:
            wanted.add(name)
            stack += re.findall(r"#/components/schemas/([A-Za-z0-9_.-]+)", json.dumps(schemas[name]))
    document = {
        "source": "https://github.com/openai/openai-openapi/blob/" + commit + "/openapi.json",
        "commit": commit,
        "license": "MIT, Copyright (c) OpenAI (https://openai.com)",
        "roots": ROOTS,
        "components": {"schemas": {name: _stripped(schemas[name]) for name in sorted(wanted)}},
    }
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(document, indent=1, sort_keys=True) + "\n")
    print(f"{len(wanted)} schemas -> {OUT}")


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2])
