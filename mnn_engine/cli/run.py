"""``generate`` and ``bench``: a model at the terminal (``chat`` is in ``chat.py``)."""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import sys
from pathlib import Path
from typing import Any

from .. import config
from ..checks import invalid
from ..engine.engine import Engine, model_options
from ..engine.settings import LoadOptions
from ..runtime import media
from ..runtime.media_header import MediaRefused, read_image_header
from ..store.models import ModelStore
from .common import (
    add_load_options,
    add_pull_options,
    add_raw_output_option,
    add_sampling,
    add_url_option,
    load_overrides,
    pull_if_missing,
)
from .remote import RemoteEngine
from .terminal import text_writer


def _response_format(args: argparse.Namespace) -> dict[str, Any]:
    """``--json-schema FILE``: the answer follows that JSON Schema."""
    if not args.json_schema:
        return {}
    try:
        schema = json.loads(Path(args.json_schema).expanduser().read_text())
    except (OSError, ValueError) as exc:
        raise invalid("json_schema", f"--json-schema {args.json_schema}: {exc}") \
            from exc
    return {"response_format": {"type": "json_schema", "json_schema": {"name": "cli", "schema": schema}}}

def _images(args: argparse.Namespace) -> list[Path]:
    """``--image FILE``s, checked as the server checks them (a format MNN decodes, within its size limits)."""
    paths = []
    for name in args.image:
        path = Path(name).expanduser().resolve()
        try:
            read_image_header(path.read_bytes())
        except OSError as exc:
            raise invalid("image", f"--image {name}: {exc.strerror or exc}") \
                from exc
        except MediaRefused as exc:
            raise invalid("image", f"--image {name}: {exc}") from exc
        paths.append(path)
    if paths and args.raw:
        raise invalid("image", "--image goes with a chat prompt, not --raw")
    return paths


def _image_prompt(text: str, images: list[Path], remote: bool) -> Any:
    """A user message with the images: MNN's <img> tags here, OpenAI's image parts for a server."""
    if remote:
        parts: list[dict[str, Any]] = [{"type": "text", "text": text}]
        for path in images:
            kind = read_image_header(path.read_bytes()).format
            parts.append({"type": "image_url", "image_url": {
                "url": f"data:image/{kind};base64," + base64.b64encode(path.read_bytes()).decode()}})
        return [{"role": "user", "content": parts}]
    return [{"role": "user", "content": "".join(media.tag("img", str(p)) for p in images) + text}]


def _generate(args: argparse.Namespace) -> int:
    images = _images(args)
    prompt: Any = args.prompt if args.raw else _image_prompt(args.prompt, images, bool(args.url))

    write = text_writer(sys.stdout, raw=args.raw_output)
    if args.url:
        engine: Any = RemoteEngine(args.url, args.model, api_key=config.api_key())
    else:
        pull_if_missing(args)
        engine = Engine()
    with contextlib.closing(engine), media.trusted(*images):  # the files named here: MNN may open them
        if not args.url:
            engine.load(args.model, **load_overrides(args))
        with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C cancels the generation; print what came
            engine.generate(prompt, callback=write, max_tokens=args.max_tokens, temperature=args.temperature,
                            seed=args.seed, enable_thinking=args.think, **_response_format(args))
        sys.stdout.write("\n")
        result = engine.last_result
    if result is not None and args.stats:
        print(json.dumps({
            "finish_reason": result.finish_reason,
            "prompt_tokens": result.prompt_tokens,
            "completion_tokens": result.completion_tokens,
            "time_to_first_token_ms": round(result.time_to_first_token_ms, 1),
            "prefill_tokens_per_second": round(result.prefill_tokens_per_second, 1),
            "decode_tokens_per_second": round(result.decode_tokens_per_second, 1),
        }), file=sys.stderr)
    return 0

def _bench(args: argparse.Namespace) -> int:
    from . import bench

    progress = None if args.json else bench.stderr_progress
    overrides = load_overrides(args)
    if args.tune:
        options = LoadOptions(**overrides).validate()  # tuning starts from the defaults, not an old preset
        result = bench.tune(args.model, options, prompt_len=args.prompt_len, gen=args.gen, runs=args.runs,
                            progress=progress, exact=args.exact)
        print(json.dumps(result, indent=2) if args.json else bench.format_tune(result))
        return 0
    store = ModelStore()
    options = model_options(store, store.resolve(args.model)[0], overrides=overrides)
    report = bench.bench(args.model, options, prompt_len=args.prompt_len, gen=args.gen, runs=args.runs,
                         store=store, progress=progress)
    print(json.dumps(report, indent=2) if args.json else bench.format_report(report))
    return 0

def add_commands(commands: Any) -> None:
    """Register this module's commands."""
    p = commands.add_parser("bench", help="measure load time, prefill/decode speed and memory on this device")
    p.add_argument("model", help="a store ID or a model directory")
    p.add_argument("--prompt-len", type=int, default=128, help="prompt tokens (default 128)")
    p.add_argument("--gen", type=int, default=128, help="generated tokens per run, end tokens ignored (default 128)")
    p.add_argument("--runs", type=int, default=5, help="measured runs (default 5)")
    p.add_argument("--tune", action="store_true",
                   help="try thread counts and MNN options; save the fastest as the model's preset")
    p.add_argument("--exact", action="store_true",
                   help="with --tune: only options that leave outputs unchanged (no KV-cache quantisation)")
    p.add_argument("--json", action="store_true")
    add_load_options(p)
    p.set_defaults(func=_bench)

    p = commands.add_parser("generate", help="answer one prompt, streaming the reply")
    p.add_argument("model", help="a store ID or a model directory; with --url, the name the server serves")
    add_url_option(p)
    p.add_argument("prompt")
    p.add_argument("--raw", action="store_true", help="use the prompt as is, without the chat template")
    p.add_argument("--image", action="append", default=[], metavar="FILE",
                   help="an image for a vision model (PNG, JPEG or BMP; repeatable)")
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--stats", action="store_true", help="print timing figures to stderr")
    p.add_argument("--json-schema", metavar="FILE", help="the answer is JSON following this JSON Schema "
                   "(needs the structured extra)")
    add_sampling(p, max_tokens=256)
    add_load_options(p)
    add_pull_options(p)
    add_raw_output_option(p)
    p.set_defaults(func=_generate)

