"""Greedy answers of the scripted model and SmolLM2, for tools/arm/check.sh.

Usage: python answers.py MODELS_DIR [OTHER_ANSWERS.json]

Prints one JSON object: per model the answer's text and tokens and the mean
log-probability per token this machine's engine gives it; with the other
machine's answers, where its tokens differ, the mean log-probability this
engine gives them too (how far apart the two engines' answers are).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from mnn_engine import Llm

PROMPTS = {"tiny-scripted": "Who are you?", "smollm2-135m": "Name three colours of the rainbow."}


def main() -> None:
    other = json.loads(Path(sys.argv[2]).read_text()) if len(sys.argv) > 2 else {}
    out = {}
    for name, prompt in PROMPTS.items():
        chat = [{"role": "user", "content": prompt}]
        with Llm(f"{sys.argv[1]}/{name}", thread_num=2) as llm:
            result = llm.generate(chat, temperature=0, max_tokens=48)
            tokens = list(result.token_ids)
            entry = {"text": result.text, "tokens": tokens,
                     "own_mean_logprob": llm.score(chat, tokens).total_logprob / len(tokens)}
            theirs = other.get(name, {}).get("tokens")
            if theirs and theirs != tokens:
                entry["other_mean_logprob"] = llm.score(chat, theirs).total_logprob / len(theirs)
            out[name] = entry
    print(json.dumps(out))


if __name__ == "__main__":
    main()
