#!/usr/bin/env python3
"""What structured output costs: decode speed with a JSON Schema against free
text, the grammar engine's time per token and per schema, and the two
dependency-free engines side by side.

Usage: python tools/bench/structured.py [--model qwen3-0.6b-shape] [--rounds 5] [--gen 128]

1. Decode: the same prompt, free text (end tokens ignored) and under a schema
   whose one string field never has to end, --gen tokens each, interleaved
   rounds; the ratio of per-round decode tok/s. Target (issue #16) >= 0.95.
2. llguidance (the engine mnn-engine uses): the model's tokenizer built once
   per load; each schema compiled; every token of a generated answer
   replayed as the loop does it: take the previous token, compute the next
   mask (microseconds per token).
3. outlines-core on the same vocabulary: compiling each schema's regex into
   its index and the mask per token. xgrammar is not measured: it needs torch,
   transformers and triton, which do not fit a phone.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np
from common import machine, median, paired_ratio, save, test_model  # tools/bench is on sys.path

PROMPT = [{"role": "user", "content": "Write a long story about a lighthouse keeper."}]
OPEN_STRING = {"type": "object", "properties": {"story": {"type": "string"}}, "required": ["story"],
               "additionalProperties": False}
SCHEMAS = {
    "small object": OPEN_STRING,
    "person": {"type": "object", "additionalProperties": False, "required": ["name", "age", "tags"], "properties": {
        "name": {"type": "string", "maxLength": 20}, "age": {"type": "integer", "minimum": 0, "maximum": 130},
        "tags": {"type": "array", "items": {"enum": ["a", "b", "c"]}, "maxItems": 5}}},
    "nested": {"type": "object", "additionalProperties": False, "required": ["items"], "properties": {
        "items": {"type": "array", "maxItems": 10, "items": {
            "type": "object", "additionalProperties": False, "required": ["id", "label", "score"], "properties": {
                "id": {"type": "integer", "minimum": 0, "maximum": 100000},
                "label": {"type": "string", "pattern": "^[A-Z][a-z]{2,12}$"},
                "score": {"type": "number", "minimum": 0, "maximum": 1}}}}}},
}


def decode_ratio(llm, rounds: int, gen: int) -> dict:
    fmt = {"type": "json_schema", "json_schema": {"name": "s", "schema": OPEN_STRING}}
    free, constrained = [], []
    for r in range(rounds):
        for kind in (("free", "schema") if r % 2 == 0 else ("schema", "free")):
            if kind == "free":
                result = llm.generate(PROMPT, temperature=0, max_tokens=gen, ignore_eos=True)
                free.append(result.decode_tokens_per_second)
            else:
                result = llm.generate(PROMPT, temperature=0, max_tokens=gen, response_format=fmt)
                assert result.completion_tokens == gen, result.text
                constrained.append(result.decode_tokens_per_second)
    return {"free_tps": median(free), "schema_tps": median(constrained),
            "ratio": paired_ratio(constrained, free)}


def llguidance_costs(llm, gen: int) -> dict:
    from mnn_engine.runtime import structured

    start = time.perf_counter()
    structured.tokenizer_for(llm)
    tokenizer_s = time.perf_counter() - start
    out = {"tokenizer_build_s": tokenizer_s, "schemas": {}}
    words = (llm.vocab_size + 31) // 32
    mask = np.zeros(words, dtype=np.uint32)
    for name, schema in SCHEMAS.items():
        grammar = structured.schema_grammar(schema)
        start = time.perf_counter()
        constraint = structured.Constraint(llm, grammar, "response_format")
        compile_s = time.perf_counter() - start
        answer = llm.generate(PROMPT, temperature=0, max_tokens=gen,
                              response_format={"type": "json_schema", "json_schema": {"schema": schema}})
        times = []
        previous = -1
        for token in answer.token_ids:  # what the loop does per token: take the last one, mask the next
            t = time.perf_counter()
            constraint.step(previous, mask.ctypes.data, mask.nbytes)
            times.append(time.perf_counter() - t)
            previous = token
        out["schemas"][name] = {"compile_ms": compile_s * 1e3, "tokens": len(times),
                                "mask_us_mean": statistics.fmean(times) * 1e6 if times else 0.0,
                                "mask_us_p50": median(times) * 1e6, "mask_us_max": max(times, default=0) * 1e6,
                                "answer_tokens": answer.token_ids}
    return out


def outlines_costs(llm, answers: dict[str, list[int]]) -> dict:
    try:
        from outlines_core import Guide, Index, Vocabulary
        from outlines_core.json_schema import build_regex_from_schema
    except ImportError:
        return {"skipped": "outlines-core is not installed (pip install outlines-core)"}
    tokens, stops = llm.vocabulary()
    start = time.perf_counter()
    by_text: dict[str, list[int]] = {}
    for i, raw in enumerate(tokens):
        if i in stops:
            continue
        text = raw.decode("utf-8", errors="replace")  # outlines-core takes strings; a few byte tokens collide
        by_text.setdefault(text, []).append(i)
    vocabulary = Vocabulary(stops[0], by_text)
    out = {"vocabulary_build_s": time.perf_counter() - start, "schemas": {}}
    for name, schema in SCHEMAS.items():
        start = time.perf_counter()
        try:
            index = Index(build_regex_from_schema(json.dumps(schema)), vocabulary)
        except Exception as exc:  # report what the engine refused
            out["schemas"][name] = {"error": str(exc)[:200]}
            continue
        compile_s = time.perf_counter() - start
        guide = Guide(index)
        times = []
        for token in answers.get(name, []):
            t = time.perf_counter()
            allowed = guide.get_tokens()
            times.append(time.perf_counter() - t)
            if token not in allowed:
                break
            guide.advance(token)
        out["schemas"][name] = {"compile_ms": compile_s * 1e3, "tokens": len(times),
                                "mask_us_mean": statistics.fmean(times) * 1e6 if times else 0.0}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="qwen3-0.6b-shape")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--gen", type=int, default=128)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()

    from mnn_engine import Llm

    with Llm(test_model(args.model), thread_num=args.threads, prompt_cache=False) as llm:
        costs = llguidance_costs(llm, args.gen)
        decode = decode_ratio(llm, args.rounds, args.gen)
        answers = {name: info.pop("answer_tokens") for name, info in costs["schemas"].items()}
        peer = outlines_costs(llm, answers)
    print(f"decode: free {decode['free_tps']:.1f} tok/s, with a schema {decode['schema_tps']:.1f} tok/s, "
          f"ratio {decode['ratio']:.3f}")
    print(f"llguidance: tokenizer {costs['tokenizer_build_s']:.2f} s once per load")
    for name, info in costs["schemas"].items():
        print(f"  {name:<13} compile {info['compile_ms']:7.1f} ms, mask {info['mask_us_mean']:6.0f} us/token "
              f"(p50 {info['mask_us_p50']:.0f}, max {info['mask_us_max']:.0f}) over {info['tokens']} tokens")
    if "skipped" in peer:
        print(f"outlines-core: {peer['skipped']}")
    else:
        print(f"outlines-core: vocabulary {peer['vocabulary_build_s']:.2f} s")
        for name, info in peer["schemas"].items():
            if "error" in info:
                print(f"  {name:<13} refused: {info['error']}")
            else:
                print(f"  {name:<13} compile {info['compile_ms']:7.1f} ms, mask {info['mask_us_mean']:6.0f} us/token "
                      f"over {info['tokens']} tokens")
    saved = save("structured", {"machine": machine(), "model": args.model, "threads": args.threads, "gen": args.gen,
                                "decode": decode, "llguidance": costs, "outlines_core": peer})
    print(f"saved {saved}")


if __name__ == "__main__":
    main()
