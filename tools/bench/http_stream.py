#!/usr/bin/env python3
"""Streaming over HTTP (SSE on loopback) versus direct engine calls.

Usage: python tools/bench/http_stream.py [--model DIR] [--threads 2] [--prompt-len 128] [--gen 128] [--iters 9]

One engine, one loaded model; direct runs (``Engine.generate`` with a
callback) and HTTP runs (a raw-socket client reading the SSE stream of
``/v1/chat/completions``) alternate. Both are timed from the client's side:
time to first token = request start to the first piece of text; decode
tokens/s = (pieces - 1) / (last piece - first piece). Ratios: HTTP decode /
direct decode (target >= 0.98; as the ratio of the medians and paired, the
median of each round's ratio); HTTP TTFT - direct TTFT (target <= 5 ms),
paired over rounds with a short prompt, whose prefill does not swamp the
difference (the long prompt's difference of medians is shown too).
Also: /health latency while a generation streams (p50/p99, target p99 <=
10 ms) and how many pieces still arrive after ``cancel()`` (target <= 1).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import socket
import threading
import time
import urllib.parse
from pathlib import Path

from common import machine, median, paired_ratio, quantile, save, test_model  # tools/bench is on sys.path

TTFT_ROUNDS = 15


def timing(start: float, stamps: list[float]) -> dict[str, float]:
    """Client-side figures from the arrival times of the pieces."""
    span = stamps[-1] - stamps[0]
    return {"ttft_ms": (stamps[0] - start) * 1e3, "decode_tps": (len(stamps) - 1) / span if span > 0 else 0.0,
            "pieces": len(stamps)}


def direct_run(engine, messages, gen: int) -> dict[str, float]:
    stamps: list[float] = []
    start = time.perf_counter()
    engine.generate(messages, callback=lambda _p: stamps.append(time.perf_counter()), temperature=0,
                    max_tokens=gen, ignore_eos=True)
    return timing(start, stamps)


def http_run(host: str, port: int, messages, gen: int) -> dict[str, float]:
    body = json.dumps({"messages": messages, "stream": True, "temperature": 0, "max_tokens": gen,
                       "ignore_eos": True}).encode()
    request = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
               b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    stamps: list[float] = []
    buffer = b""
    cpu_start = time.process_time()
    start = time.perf_counter()
    with socket.create_connection((host, port)) as sock:
        sock.sendall(request)
        while b"data: [DONE]" not in buffer:
            chunk = sock.recv(65536)
            if not chunk:
                break
            now = time.perf_counter()
            buffer += chunk
            while b"\n\n" in buffer:
                event, buffer = buffer.split(b"\n\n", 1)
                if b'"content":"' in event and b'"content":""' not in event:
                    stamps.append(now)
                elif b"[DONE]" in event:
                    buffer = b"data: [DONE]"
    return timing(start, stamps) | {"client_cpu_ms": (time.process_time() - cpu_start) * 1e3}


def thread_cpu_ms(thread: threading.Thread) -> float:
    """CPU time a thread of this process has run, in ns resolution (Linux /proc schedstat)."""
    return int(Path(f"/proc/self/task/{thread.native_id}/schedstat").read_text().split()[0]) / 1e6


def health_latency(host: str, port: int, engine, messages, seconds: float = 3.0) -> list[float]:
    """/health round trips (ms) measured while a long generation streams to another client."""
    worker = threading.Thread(target=lambda: engine.generate(
        messages, callback=lambda _p: None, temperature=0, max_tokens=100000, ignore_eos=True))
    worker.start()
    time.sleep(0.2)
    latencies = []
    deadline = time.monotonic() + seconds
    request = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    while time.monotonic() < deadline:
        start = time.perf_counter()
        with socket.create_connection((host, port)) as sock:
            sock.sendall(request)
            while sock.recv(65536):
                pass
        latencies.append((time.perf_counter() - start) * 1e3)
        time.sleep(0.005)
    engine.cancel_generation()
    worker.join()
    return latencies


def pieces_after_cancel(engine, messages) -> int:
    """Pieces that arrive after cancel() returned (cancel fired from another thread)."""
    seen: list[float] = []
    cancelled_at: list[float] = []

    def cancel() -> None:
        engine.cancel_generation()
        cancelled_at.append(time.perf_counter())

    def on_piece(_p: str) -> None:
        seen.append(time.perf_counter())
        if len(seen) == 5:
            threading.Thread(target=cancel).start()

    engine.generate(messages, callback=on_piece, temperature=0, max_tokens=100000, ignore_eos=True)
    return sum(1 for t in seen if cancelled_at and t > cancelled_at[0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--prompt-len", type=int, default=128)
    parser.add_argument("--gen", type=int, default=128)
    parser.add_argument("--iters", type=int, default=9)
    args = parser.parse_args()

    import tempfile

    from mnn_engine import Engine, ModelStore, jsonutil
    from mnn_engine.cli.bench import TEXT

    model = args.model or str(test_model("qwen3-0.6b-shape"))
    engine = Engine(ModelStore(tempfile.mkdtemp(prefix="mnn-bench-")))
    engine.load(model, threads=args.threads, prompt_cache=False)  # every round prefills the whole prompt
    messages = [{"role": "user", "content": TEXT * max(1, args.prompt_len // 45)}]
    url = engine.start_server(port=0)
    server_thread = next(t for t in threading.enumerate() if t.name == "mnn-engine-server")
    parts = urllib.parse.urlsplit(url)
    # the HTTP client runs in its own process, as a real client would
    client = multiprocessing.get_context("spawn").Pool(1)
    try:
        direct_run(engine, messages, 8)
        client.apply(http_run, (parts.hostname, parts.port, messages, 8))
        direct, over_http = [], []
        for i in range(args.iters):
            order = [0, 1] if i % 2 == 0 else [1, 0]
            for which in order:
                if which == 0:
                    direct.append(direct_run(engine, messages, args.gen))
                else:
                    cpu_start = thread_cpu_ms(server_thread)
                    over_http.append(client.apply(http_run, (parts.hostname, parts.port, messages, args.gen)))
                    over_http[-1]["server_cpu_ms"] = thread_cpu_ms(server_thread) - cpu_start
        # TTFT overhead on a short prompt: the prefill of a long one varies by tens of ms between runs,
        # which would swamp the few ms the HTTP path adds
        short = [{"role": "user", "content": "Hi"}]
        ttft_direct, ttft_http = [], []
        for i in range(TTFT_ROUNDS):
            for which in ([0, 1] if i % 2 == 0 else [1, 0]):
                if which == 0:
                    ttft_direct.append(direct_run(engine, short, 4)["ttft_ms"])
                else:
                    ttft_http.append(client.apply(http_run, (parts.hostname, parts.port, short, 4))["ttft_ms"])
        latencies = health_latency(parts.hostname, parts.port, engine, messages)
        after_cancel = [pieces_after_cancel(engine, messages) for _ in range(10)]
    finally:
        client.close()
        engine.close()
    result = {
        "machine": machine(), "model": model, "threads": args.threads, "gen": args.gen, "iters": args.iters,
        "direct": {"decode_tps": median([r["decode_tps"] for r in direct]),
                   "ttft_ms": median([r["ttft_ms"] for r in direct])},
        "http": {"decode_tps": median([r["decode_tps"] for r in over_http]),
                 "ttft_ms": median([r["ttft_ms"] for r in over_http])},
        "health_ms": {"p50": quantile(latencies, 50), "p99": quantile(latencies, 99), "n": len(latencies)},
        "pieces_after_cancel": {"max": max(after_cancel), "all": after_cancel},
        "samples": {"direct": direct, "http": over_http, "short_prompt_ttft_ms": {"direct": ttft_direct,
                                                                                  "http": ttft_http}},
        "json": jsonutil.BACKEND,
    }
    result["http_over_direct_decode"] = result["http"]["decode_tps"] / result["direct"]["decode_tps"]
    result["http_over_direct_decode_paired"] = paired_ratio([r["decode_tps"] for r in over_http],
                                                            [r["decode_tps"] for r in direct])
    result["http_minus_direct_ttft_ms"] = result["http"]["ttft_ms"] - result["direct"]["ttft_ms"]
    # CPU the HTTP path costs per token: the server's event-loop thread plus the client process. On a
    # machine whose cores MNN's threads already fill, this time comes out of MNN's.
    result["http_cpu_us_per_token"] = median([(h["server_cpu_ms"] + h["client_cpu_ms"]) * 1e3 / max(1, h["pieces"])
                                              for h in over_http])
    result["token_time_us"] = 1e6 / result["direct"]["decode_tps"]
    result["short_prompt_ttft_overhead_ms"] = median([h - d for h, d in zip(ttft_http, ttft_direct, strict=True)])
    print(f"direct  decode {result['direct']['decode_tps']:.2f} tok/s  TTFT {result['direct']['ttft_ms']:.1f} ms")
    print(f"HTTP    decode {result['http']['decode_tps']:.2f} tok/s  TTFT {result['http']['ttft_ms']:.1f} ms")
    print(f"ratio HTTP/direct decode {result['http_over_direct_decode']:.3f}, paired "
          f"{result['http_over_direct_decode_paired']:.3f} (target >= 0.98); "
          f"TTFT difference {result['http_minus_direct_ttft_ms']:+.1f} ms (medians, {args.prompt_len}-token prompt)")
    print(f"CPU of the HTTP path (server event loop + client) per token: {result['http_cpu_us_per_token']:.0f} us, "
          f"{result['http_cpu_us_per_token'] / result['token_time_us'] * 100:.1f} % of a token's time")
    print(f"TTFT over HTTP - direct, short prompt, paired over {TTFT_ROUNDS} rounds: "
          f"{result['short_prompt_ttft_overhead_ms']:+.1f} ms (target <= 5)")
    print(f"/health while generating: p50 {result['health_ms']['p50']:.2f} ms, p99 {result['health_ms']['p99']:.2f} ms "
          f"over {len(latencies)} requests (target p99 <= 10)")
    print(f"pieces after cancel(): max {max(after_cancel)} over {len(after_cancel)} trials (target <= 1)")
    print(f"saved {save('http', result)}")


if __name__ == "__main__":
    main()
