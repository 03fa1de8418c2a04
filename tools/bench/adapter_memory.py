#!/usr/bin/env python3
"""What a LoRA adapter costs in memory: RSS of a base model alone, of the
base with two adapters (``Llm.with_adapter``: MNN's ``Llm::create_lora``),
and of two full copies of the model, each case in a fresh process, after
each model or adapter generated a few tokens.

Usage: python tools/bench/adapter_memory.py [--base NAME --adapter NAME] [--big]

Default: the tiny test model and tiny-lora-a (rank 8 on every projection);
``--big``: qwen3-0.6b-shape and qwen3-0.6b-shape-lora (build them with
``tools/models/build_test_models.py --big``). The issue's expectation was
an adapter at a small fraction of a model; this reports what MNN 3.6.1
really shares (the weights) and what it does not (a runtime, buffers and KV
cache per ``Llm``).
"""

from __future__ import annotations

import argparse
import json
import os
import textwrap

from common import machine, run_worker, save, test_model  # tools/bench is on sys.path

CASE = textwrap.dedent("""
    import gc, json, sys
    from mnn_engine import Llm
    from mnn_engine.runtime.memory import give_back_memory, rss_bytes
    base_dir, adapter_dir, case = sys.argv[1], sys.argv[2], sys.argv[3]

    def rss_mib():
        gc.collect(); give_back_memory()
        return rss_bytes() / 2**20

    start = rss_mib()
    base = Llm(base_dir, thread_num=2).load()
    base.generate("Hi", max_tokens=4)
    held = [base]
    if case == "adapters":
        for _ in range(2):
            held.append(base.with_adapter(adapter_dir))
            held[-1].generate("Hi", max_tokens=4)
    elif case == "two-models":
        held.append(Llm(base_dir, thread_num=2).load())
        held[-1].generate("Hi", max_tokens=4)
    print(json.dumps({"rss_mib": rss_mib() - start,
                      "adapter_mib": [h.adapter_bytes / 2**20 for h in held if h.adapter is not None]}))
""")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", default=None)
    parser.add_argument("--adapter", default=None)
    parser.add_argument("--big", action="store_true")
    args = parser.parse_args()
    base = args.base or ("qwen3-0.6b-shape" if args.big else "tiny")
    adapter = args.adapter or (f"{base}-lora" if args.big else "tiny-lora-a")
    base_dir, adapter_dir = test_model(base), test_model(adapter)
    cases = {case: run_worker(CASE, base_dir, adapter_dir, case) for case in ("base", "adapters", "two-models")}
    alone = cases["base"]["rss_mib"]
    per_adapter = (cases["adapters"]["rss_mib"] - alone) / 2
    second_model = cases["two-models"]["rss_mib"] - alone
    result = {
        "machine": machine(), "base": base, "adapter": adapter,
        "weight_file_mib": os.path.getsize(base_dir / "llm.mnn.weight") / 2**20,
        "adapter_file_mib": os.path.getsize(adapter_dir / "lora.mnn") / 2**20,
        "cases": cases,
        "rss_base_mib": alone,
        "rss_per_adapter_mib": per_adapter,
        "rss_second_model_mib": second_model,
        "adapter_vs_second_model": per_adapter / second_model if second_model > 0 else None,
    }
    print(json.dumps(result, indent=1))
    save("adapter_memory" + ("_big" if args.big else ""), result)


if __name__ == "__main__":
    main()
