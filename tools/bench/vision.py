#!/usr/bin/env python3
"""Time to first token with one image, on the tiny Qwen2-VL test model, and where it goes.

Usage: python tools/bench/vision.py [--rounds 7] [--threads 2] [--size 640x480]

One process, the model loaded once. Each round, side by side: the question
alone, then with one PNG (``--size``, a photo-like gradient). For the image
prompt, the share of each stage: MNN's image work inside its tokenizer
(decoding the file, resizing to the model's 420x420, the visual graph: the
tokenize call with the image minus the one without), the prefill of the
prompt with its 227 image tokens (the engine's own prefill time), and the
rest (the chat template, sampling the first token). Medians; the ratio is
image / text-only time to first token, paired by round.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from common import machine, median, paired_ratio, save, test_model  # tools/bench is on sys.path (and tests/)
from media_samples import png  # the suite's own PNG writer

QUESTION = "What is in this picture?"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--size", default="640x480")
    args = parser.parse_args()
    width, height = (int(v) for v in args.size.split("x"))

    from mnn_engine import Llm
    from mnn_engine.runtime.media import trusted

    picture = Path(tempfile.mkdtemp(prefix="mnn-vision-")) / "photo.png"
    picture.write_bytes(png(width, height, pattern=True))
    text_prompt = [{"role": "user", "content": QUESTION}]
    image_prompt = [{"role": "user", "content": f"<img>{picture}</img>{QUESTION}"}]
    text_ttft, image_ttft, encode, prefill, tokens = [], [], [], [], 0
    with Llm(test_model("tiny-vision"), thread_num=args.threads) as llm, trusted(picture):
        llm.generate(image_prompt, max_tokens=1)  # warm-up
        for _ in range(args.rounds):
            started = time.perf_counter()
            llm.generate(text_prompt, max_tokens=1, temperature=0)
            text_ttft.append(time.perf_counter() - started)
            started = time.perf_counter()
            result = llm.generate(image_prompt, max_tokens=1, temperature=0)
            image_ttft.append(time.perf_counter() - started)
            prefill.append(result.prefill_ms / 1000)
            tokens = result.prompt_tokens
            started = time.perf_counter()
            llm.tokenize(f"<img>{picture}</img>{QUESTION}")
            with_image = time.perf_counter() - started
            started = time.perf_counter()
            llm.tokenize(QUESTION)
            encode.append(with_image - (time.perf_counter() - started))
    total = median(image_ttft)
    data = {"machine": machine(), "threads": args.threads, "rounds": args.rounds, "image": args.size,
            "prompt_tokens": tokens, "text_ttft_s": median(text_ttft), "image_ttft_s": total,
            "ratio": paired_ratio(image_ttft, text_ttft), "encode_s": median(encode), "prefill_s": median(prefill),
            "encode_share": median(encode) / total, "prefill_share": median(prefill) / total}
    print(data)
    print(f"saved {save('vision', data)}")


if __name__ == "__main__":
    main()
