#!/usr/bin/env python3
"""Memory under distinct text: RSS growth per 1,000 tokenizer requests of
~2 KB of words never seen before, against one text repeated (the control).

Usage: python tools/bench/distinct_text_memory.py [--model DIR] [--requests 2000]
       [--http]

MNN 3.6.1's BPE tokenizer cached every distinct word it ever saw (an
unbounded map): +30.5 MiB per 1,000 such requests through the server. Our
MNN patch (subprojects/packagefiles/MNN/0001-tokenizer-bounded-word-cache.patch)
bounds it like Hugging Face tokenizers' cache. Target: growth under 2 MiB per
1,000 distinct-text requests once the cache is full. Each run is a fresh
process per case; ``--http`` sends the texts to ``POST /tokenize`` of a
background server instead of calling ``Llm.tokenize``.
"""

from __future__ import annotations

import argparse
import json
import textwrap

from common import machine, run_worker, save, test_model  # tools/bench is on sys.path

CASE = textwrap.dedent("""
    import json, random, string, sys, urllib.request
    from mnn_engine import Engine, Llm
    model, requests, distinct, http = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1", sys.argv[4] == "1"

    def rss_mib():
        for line in open("/proc/self/status"):
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024

    rng = random.Random(7)
    def text():
        return " ".join("".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(4, 9)))
                        for _ in range(300))
    same = text()
    if http:
        engine = Engine(); engine.load(model, threads=1); url = engine.start_server(port=0)
        def tokenize(t):
            req = urllib.request.Request(url + "/tokenize", json.dumps({"content": t}).encode(),
                                         {"Content-Type": "application/json"})
            urllib.request.urlopen(req).read()
    else:
        llm = Llm(model, thread_num=1); llm.load(); tokenize = llm.tokenize
    for _ in range(200):  # warm-up: allocator pools, the first texts
        tokenize(text() if distinct else same)
    start = rss_mib()
    marks = []
    for i in range(requests):
        tokenize(text() if distinct else same)
        if (i + 1) % 500 == 0:
            marks.append(rss_mib())
    print(json.dumps({"start_mib": start, "marks_mib": marks}))
""")


def run(model: str, requests: int, distinct: bool, http: bool) -> dict:
    data = run_worker(CASE, model, requests, int(distinct), int(http))
    data["growth_mib_per_1000"] = (data["marks_mib"][-1] - data["start_mib"]) * 1000 / requests
    # once the cache is full: the second half only
    half = len(data["marks_mib"]) // 2
    if half:
        data["late_growth_mib_per_1000"] = ((data["marks_mib"][-1] - data["marks_mib"][half - 1]) * 1000
                                            / (requests - half * 500))
    return data


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=None)
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--http", action="store_true")
    args = parser.parse_args()
    model = args.model or str(test_model("tiny"))
    from mnn_engine import build_info

    result = {"machine": machine(), "build": build_info()["mode"], "requests": args.requests, "http": args.http,
              "distinct": run(model, args.requests, True, args.http),
              "repeated": run(model, args.requests, False, args.http)}
    print(json.dumps(result, indent=1))
    save("distinct_text_memory", result)


if __name__ == "__main__":
    main()
