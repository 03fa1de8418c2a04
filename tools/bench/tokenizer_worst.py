#!/usr/bin/env python3
"""Tokenizer cost on adversarial prompts, up to the largest body the server accepts.

Usage: python tools/bench/tokenizer_worst.py [--model NAME ...] [--max-bytes 8388608]

For each model: runs of one character, emoji, random CJK, random bytes,
digits, ordinary words, and the model's longest token repeated (the densest
text that can still fit the context), at 8 KB (about what fits a 2K context), 40 KB, 1 MB and the body limit.
Each row is the time `Llm.prompt_ids` takes (what the server does on the
generation thread) and its outcome: a token count, or the refusal. Also MNN's
own tokenizer on the whole text, where it stays under a few seconds, for
comparison.
"""

from __future__ import annotations

import argparse
import random
import time

from common import test_model  # tools/bench is on sys.path

from mnn_engine import Llm, MnnEngineError


def cases(llm: Llm, size: int, rng: random.Random) -> dict[str, str]:
    longest = max(range(llm.vocab_size), key=lambda t: len(llm.token_bytes(t)))
    longest_text = llm.token_bytes(longest).decode("utf-8", "replace")
    return {
        "one letter": "a" * size,
        "emoji": "".join(chr(rng.randint(0x1F600, 0x1F64F)) for _ in range(size // 4)),
        "random CJK": "".join(chr(rng.randint(0x4E00, 0x9FFF)) for _ in range(size // 3)),
        "random bytes": rng.randbytes(min(size, 1 << 20)).decode("utf-8", "replace"),
        "digits": "7" * size,
        "words": ("the quick brown fox jumps over the lazy dog " * (size // 44 + 1))[:size],
        "longest token": (longest_text * (size // max(1, len(longest_text.encode())) + 1))[: size],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", nargs="+", default=["tiny", "smollm2-135m"])
    ap.add_argument("--max-bytes", type=int, default=8 * 1024 * 1024)
    args = ap.parse_args()
    rng = random.Random(7)
    print(f"{'model':14} {'input':14} {'bytes':>9} {'ms':>8}  outcome")
    worst = 0.0
    for name in args.model:
        with Llm(test_model(name), thread_num=1) as llm:
            for size in (8_000, 40_000, 1 << 20, args.max_bytes):
                for label, text in cases(llm, size, rng).items():
                    started = time.perf_counter()
                    try:
                        outcome = f"{len(llm.prompt_ids(text))} tokens"
                    except MnnEngineError as exc:
                        outcome = exc.code
                    ms = (time.perf_counter() - started) * 1000
                    worst = max(worst, ms)
                    print(f"{name:14} {label:14} {len(text.encode('utf-8', 'surrogatepass')):9d} {ms:8.1f}  {outcome}",
                          flush=True)
    print(f"worst: {worst:.0f} ms")


if __name__ == "__main__":
    main()
