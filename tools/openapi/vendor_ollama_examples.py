#!/usr/bin/env python3
"""Vendor the curl examples of Ollama's docs/api.md that the suite runs as written.

Usage: python tools/openapi/vendor_ollama_examples.py API_MD COMMIT

API_MD is ``docs/api.md`` of github.com/ollama/ollama (MIT licensed) at
COMMIT. Every example for a route this server serves is kept with its
section, the curl command exactly as documented (most declare no
Content-Type: ``curl -d``) and the top-level fields of the last JSON
response the section documents. Written to
``tests/schemas/ollama_api_examples.json``; ``tests/server/test_wire.py``
runs them.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

#: the routes served here (docs/api.md documents more: create, copy, delete, push, blobs)
SERVED = ("/api/generate", "/api/chat", "/api/tags", "/api/show", "/api/ps", "/api/embed", "/api/embeddings",
          "/api/version", "/api/pull")
OUT = Path(__file__).resolve().parents[2] / "tests" / "schemas" / "ollama_api_examples.json"
#: keys that mark a block as one of Ollama's answers (a JSON-mode example also shows the model's output)
ANSWER_KEYS = {"done", "models", "embeddings", "embedding", "version", "modelfile", "model_info", "status"}


def main(api_md: Path, commit: str) -> None:
    text = api_md.read_text()
    examples = []
    for section in re.split(r"^(?=### )", text, flags=re.M):  # one route's documentation
        heading = ""
        pending: dict | None = None
        for match in re.finditer(r"^(#{4,5} [^\n]*)$|^```(\w*)\n(.*?)^```", section, re.M | re.S):
            if match.group(1):
                if match.group(1).startswith("#### "):
                    heading = match.group(1).lstrip("# ").strip()
                continue
            kind, code = match.group(2), match.group(3).strip()
            route = re.search(r"localhost:11434(/api/\w+)", code)
            if kind == "shell" and code.startswith("curl"):
                pending = None
                if route and route.group(1) in SERVED:
                    pending = {"section": f"{section.splitlines()[0].lstrip('# ')} / {heading}",
                               "route": route.group(1), "command": code, "documented_fields": []}
                    examples.append(pending)
            elif kind == "json" and pending is not None:
                try:
                    answer = json.loads(code)
                except ValueError:
                    continue  # an elided example ("...")
                if isinstance(answer, dict) and ANSWER_KEYS & answer.keys():  # not a model's JSON output
                    pending["documented_fields"] = sorted(answer)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps({"source": f"https://github.com/ollama/ollama/blob/{commit}/docs/api.md",
                               "commit": commit, "license": "MIT, Copyright (c) Ollama",
                               "examples": examples}, indent=1) + "\n")
    print(f"{len(examples)} examples -> {OUT}")


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2])
