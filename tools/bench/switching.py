#!/usr/bin/env python3
"""Switching models on a server of the store: what a request that names another model costs, and memory.

Usage: python tools/bench/switching.py [--rounds 5] [--threads 2]

A real server (``ModelPool`` on loopback, ``--max-loaded 1``) over a store of
the test models (tiny, SmolLM2-135M, the Qwen3-0.6B shape). Each figure is
the time from sending a one-token streamed chat request to its first token,
measured at the client:

- stay: the model is loaded (the baseline, measured in the same round);
- switch, warm: the request names the other model, which loads in its turn
  (the loaded one unloads first); its files and MNN's mmap cache are in the
  page cache;
- switch, cold: the same after dropping the page cache (needs root; skipped
  without it), as on a phone whose memory went to other apps;
- first load: the model's first load ever (an empty mmap cache: MNN
  prepares its weights and writes the cache, after the first-touch child).

Ratios are switch / stay of the same round (paired). Memory: the server
process's RSS before a load, with the model loaded (after one answer), and
after it is unloaded (``keep_alive: 0``), per model, once every model has
been loaded once (a process's first load and answer also import and build
what stays for its life); then again without the allocator's give-back
(``runtime.memory.give_back_memory``), to show what it is for.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import shutil
import tempfile
import time
import urllib.parse
from pathlib import Path

from common import machine, median, paired_ratio, save, test_model  # tools/bench is on sys.path

MODELS = {"tiny": "tiny", "smollm": "smollm2-135m", "qwen3-shape": "qwen3-0.6b-shape"}
DROP_CACHES = Path("/proc/sys/vm/drop_caches")


def first_token_s(url: str, model: str) -> float:
    parts = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=300)
    body = {"model": model, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 1, "stream": True,
            "temperature": 0}
    started = time.perf_counter()
    try:
        conn.request("POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
        response = conn.getresponse()
        assert response.status == 200, response.read()
        for line in response:
            if line.startswith(b"data: ") and b'"content"' in line and b'"content":""' not in line:
                first = time.perf_counter() - started
                response.read()
                return first
        return time.perf_counter() - started
    finally:
        conn.close()


def memory_pass(url: str, pool, sizes: dict[str, int], rss_bytes) -> dict[str, dict[str, float]]:
    """RSS before, loaded (after one answer) and after the unload, per model."""
    rows = {}
    for model in MODELS:
        before = rss_bytes()
        first_token_s(url, model)
        loaded = rss_bytes()
        pool.unload(model)
        rows[model] = {"before_mib": before / 2**20, "loaded_mib": loaded / 2**20,
                       "after_unload_mib": rss_bytes() / 2**20, "weights_mib": sizes[model] / 2**20}
    return rows


def drop_caches() -> bool:
    if not os.access(DROP_CACHES, os.W_OK):
        return False
    os.sync()
    DROP_CACHES.write_text("3\n")
    return True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()

    from mnn_engine import ModelPool, ModelStore
    from mnn_engine.runtime.memory import rss_bytes

    root = Path(tempfile.mkdtemp(prefix="mnn-switch-"))
    try:
        store = ModelStore(root)
        for model_id, name in MODELS.items():
            store.import_model(test_model(name), model_id=model_id)
        sizes = {m: store.get(m).size_bytes for m in MODELS}
        pool = ModelPool(store, defaults={"threads": args.threads}, max_loaded=1, keep_alive=None)
        url = pool.start_server(port=0)
        try:
            first = {}
            for model in MODELS:  # the first load ever
                first[model] = first_token_s(url, model)
                pool.unload(model)
            memory = {"give_back": memory_pass(url, pool, sizes, rss_bytes)}
            import mnn_engine.engine.pool as pool_module

            kept = pool_module.give_back_memory
            pool_module.give_back_memory = lambda: None
            try:
                memory["no_give_back"] = memory_pass(url, pool, sizes, rss_bytes)
            finally:
                pool_module.give_back_memory = kept
            rows = {}
            names = list(MODELS)
            cold_ok = True
            for model in names:
                other = names[(names.index(model) + 1) % len(names)]
                stay, warm, cold = [], [], []
                for _ in range(args.rounds):
                    first_token_s(url, other)  # the other model is loaded
                    warm.append(first_token_s(url, model))  # switch to this one: the other unloads
                    stay.append(first_token_s(url, model))  # loaded: the baseline
                    first_token_s(url, other)
                    if cold_ok and drop_caches():
                        cold.append(first_token_s(url, model))
                    else:
                        cold_ok = False
                rows[model] = {"weights_mib": sizes[model] / 2**20, "first_load_s": first[model],
                               "stay_s": median(stay), "switch_warm_s": median(warm),
                               "switch_warm_ratio": paired_ratio(warm, stay),
                               "switch_cold_s": median(cold) if cold else None,
                               "switch_cold_ratio": paired_ratio(cold, stay[:len(cold)]) if cold else None}
        finally:
            pool.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    data = {"machine": machine(), "threads": args.threads, "rounds": args.rounds, "rows": rows, "memory": memory,
            "cold_measured": cold_ok}
    print(json.dumps(data, indent=2))
    print(f"saved {save('switching', data)}")


if __name__ == "__main__":
    main()
