"""The child side of the first touch (``first_touch.check_in_child`` runs it):
load the model, exercise the tokenizer, the chat template and one forward,
reporting each stage on stdout so the parent can name the one that crashed.
Only the child imports ``Llm``; the parent side never does."""

from __future__ import annotations

import json
import sys
from typing import Any

from ..errors import MnnEngineError
from .first_touch import RESULT_PREFIX, STAGE_PREFIX
from .llm import Llm


def _stage(name: str) -> None:
    print(STAGE_PREFIX + name, flush=True)


def _child(config: str, overrides: dict[str, Any]) -> dict[str, Any]:
    llm = Llm(config, **overrides)
    _stage("load")
    llm.load_in_this_process()
    _stage("tokenize")
    ids = llm.tokenize("Hello, world! \u4f60\u597d \U0001F600 <think>")
    _stage("vocabulary")
    llm.detokenize_bytes(list(range(llm.vocab_size)))
    _stage("template")
    prompt = llm.apply_chat_template([{"role": "system", "content": "You are brief."},
                                      {"role": "user", "content": "Hi"}])
    _stage("forward")
    if llm.kind == "embedding":
        llm.embed(["Hi", "Hello, world!"])
    else:
        llm.generate(prompt, max_tokens=2, temperature=0)
    llm.close()
    return {"tokens": len(ids)}


def main() -> None:
    """The child: ``python -c ... CONFIG_PATH OVERRIDES_JSON``."""
    try:
        out = _child(sys.argv[1], json.loads(sys.argv[2]))
    except MnnEngineError as exc:
        out = {"code": exc.code, "message": exc.message, "param": exc.param}
    print(RESULT_PREFIX + json.dumps(out), flush=True)
