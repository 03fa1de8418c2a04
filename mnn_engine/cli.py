"""Command line: ``python -m mnn_engine ...``."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from . import __version__
from .errors import MnnEngineError
from .llm import Llm


def _generate(args: argparse.Namespace) -> int:
    overrides = {"thread_num": args.threads} if args.threads else {}
    prompt = args.prompt if args.raw else [{"role": "user", "content": args.prompt}]
    with Llm(args.model, **overrides) as llm:
        try:
            for piece in llm.stream(prompt, max_tokens=args.max_tokens, temperature=args.temperature,
                                    seed=args.seed, enable_thinking=args.think):
                sys.stdout.write(piece)
                sys.stdout.flush()
        except KeyboardInterrupt:
            pass
        sys.stdout.write("\n")
        result = llm.last_result
    if result is not None and args.stats:
        stats = {
            "finish_reason": result.finish_reason,
            "prompt_tokens": result.prompt_tokens,
            "completion_tokens": result.completion_tokens,
            "time_to_first_token_ms": round(result.time_to_first_token_ms, 1),
            "prefill_tokens_per_second": round(result.prefill_tokens_per_second, 1),
            "decode_tokens_per_second": round(result.decode_tokens_per_second, 1),
        }
        print(json.dumps(stats), file=sys.stderr)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m mnn_engine", description="Run MNN language models.")
    parser.add_argument("--version", action="version", version=f"mnn-engine {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    gen = commands.add_parser("generate", help="answer one prompt, streaming the reply")
    gen.add_argument("model", help="model directory or its config.json")
    gen.add_argument("prompt")
    gen.add_argument("--raw", action="store_true", help="use the prompt as is, without the chat template")
    gen.add_argument("--max-tokens", type=int, default=256)
    gen.add_argument("--temperature", type=float, default=None, help="default: the model's own")
    gen.add_argument("--seed", type=int, default=None)
    gen.add_argument("--threads", type=int, default=None)
    gen.add_argument("--think", action=argparse.BooleanOptionalAction, default=None,
                     help="turn a thinking model's reasoning on or off")
    gen.add_argument("--stats", action="store_true", help="print timing figures to stderr")
    gen.set_defaults(func=_generate)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except MnnEngineError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
