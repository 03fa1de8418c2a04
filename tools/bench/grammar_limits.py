#!/usr/bin/env python3
"""How llguidance fares with big JSON schemas: the measurement behind
``structured.SCHEMA_LIMITS`` and ``grammar.COMPILE_STACK_BYTES``.

Usage: python tools/bench/grammar_limits.py [--stack-mib 64] [--sizes 1000,5000,10000]

For each kind of size (required names, properties, optional properties, enum
items, anyOf members, nesting) and each size, a fresh process compiles the
schema and computes the first token mask on a thread with the given stack,
with a byte vocabulary. It prints ok / llguidance's refusal / the signal that
killed it, and the seconds taken. A crash is what the limits and the sandbox
child exist for (30,000 required names: SIGSEGV on an 8 MiB stack).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import textwrap

from common import machine, save  # tools/bench is on sys.path

CASE = textwrap.dedent("""
    import json, sys, time, llguidance as ll
    from mnn_engine.runtime import grammar
    from mnn_engine.runtime.grammar_sandbox import byte_tokenizer
    kind, n, stack = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    if kind == "required":
        schema = {"type": "object", "properties": {}, "required": [f"r{i}" for i in range(n)]}
    elif kind == "properties":
        schema = {"type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(n)},
                  "required": [f"p{i}" for i in range(n)]}
    elif kind == "optional":
        schema = {"type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(n)}}
    elif kind == "enum":
        schema = {"enum": [f"e{i}" for i in range(n)]}
    elif kind == "anyof":
        schema = {"anyOf": [{"type": "object", "properties": {f"k{i}": {"type": "integer"}}, "required": [f"k{i}"]}
                            for i in range(n)]}
    else:
        schema = {"type": "string"}
        for _ in range(n):
            schema = {"type": "object", "properties": {"a": schema}, "required": ["a"]}
    tokens = [bytes([i]) for i in range(256)] + [b"<eos>"]
    tok = grammar.make_tokenizer(ll, tokens, [256], byte_tokenizer(tokens))
    started = time.perf_counter()
    try:
        text = ll.LLMatcher.grammar_from_json_schema(json.dumps(schema))
        grammar.compile_matcher(tok, text, "schema", stack)
        verdict = "ok"
    except Exception as exc:
        verdict = "refused: " + str(getattr(exc, "message", exc))[:80]
    print(json.dumps({"verdict": verdict, "seconds": round(time.perf_counter() - started, 2)}))
""")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--stack-mib", type=int, default=64)
    parser.add_argument("--sizes", default="1000,5000,10000,30000")
    args = parser.parse_args()
    rows = []
    for kind in ("required", "properties", "optional", "enum", "anyof", "nesting"):
        for n in (int(x) for x in args.sizes.split(",")):
            n = min(n, 200) if kind == "nesting" else n
            try:
                out = subprocess.run([sys.executable, "-c", CASE, kind, str(n), str(args.stack_mib << 20)],
                                     capture_output=True, text=True, timeout=300)
                if out.returncode == 0:
                    row = json.loads(out.stdout.strip().splitlines()[-1])
                else:
                    died = f"killed by signal {-out.returncode}" if out.returncode < 0 else out.stderr[-80:]
                    row = {"verdict": died, "seconds": None}
            except subprocess.TimeoutExpired:
                row = {"verdict": "over 300 s", "seconds": None}
            rows.append({"kind": kind, "size": n, **row})
            print(f"{kind:10} {n:>7}  {row['verdict']:60} {row['seconds']}", flush=True)
    save("grammar_limits", {"machine": machine(), "stack_mib": args.stack_mib, "rows": rows})


if __name__ == "__main__":
    main()
