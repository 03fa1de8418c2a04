#!/usr/bin/env python3
"""The agent APIs against the chat route: decode and time to first token over
``/v1/responses`` (OpenAI's Responses API) and ``/v1/messages`` (Anthropic's)
beside ``/v1/chat/completions``, and a ``previous_response_id`` chain against
re-sending the whole history.

Usage: python tools/bench/agent_apis.py [--model DIR] [--threads 2] [--gen 128] [--iters 9] [--turns 6]

One engine, one loaded model, one server on loopback; a raw-socket client in
its own process reads each route's stream (the chat route's SSE chunks,
the Responses API's ``response.output_text.delta`` events, Anthropic's
``text_delta`` events), the three routes taking turns in a rotating order.
Decode tokens/s = (pieces - 1) / (last piece - first piece), end tokens
ignored; ratios are paired per round (target >= 0.98). TTFT differences are
paired on a short prompt (target <= +5 ms). The chain: ``--turns`` turns
of a conversation, each turn's TTFT when it names the last response
(``previous_response_id``) and when it sends the whole history again
(``store: false``), the prompt cache on in both.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import socket
import tempfile
import time
import urllib.parse
import urllib.request

from common import machine, median, paired_ratio, save, test_model  # tools/bench is on sys.path

ROUTES = ("chat", "responses", "messages")
#: how each route's stream marks a piece of text, and its end
MARKS = {"chat": (b'"content":"', (b"data: [DONE]",)),
         "responses": (b"response.output_text.delta", (b"event: response.completed", b"event: response.incomplete")),
         "messages": (b'"text_delta"', (b"message_stop",))}


def body(route: str, text: str, gen: int, model: str) -> tuple[str, dict]:
    common = {"stream": True, "temperature": 0, "ignore_eos": True}
    if route == "chat":
        return "/v1/chat/completions", {**common, "messages": [{"role": "user", "content": text}], "max_tokens": gen}
    if route == "responses":
        return "/v1/responses", {**common, "input": text, "max_output_tokens": gen, "store": False}
    return "/v1/messages", {**common, "model": model, "messages": [{"role": "user", "content": text}],
                            "max_tokens": gen}


def stream(host: str, port: int, path: str, payload: dict, route: str) -> dict:
    """Send one request, time each piece of text as it arrives; the last event's data too."""
    raw = json.dumps(payload).encode()
    request = (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
               f"Content-Length: {len(raw)}\r\n\r\n").encode() + raw
    piece, end = MARKS[route]
    stamps: list[float] = []
    buffer, last = b"", b""
    start = time.perf_counter()
    with socket.create_connection((host, port), timeout=300) as sock:
        sock.sendall(request)
        done = False
        while not done:
            chunk = sock.recv(65536)
            if not chunk:
                break
            now = time.perf_counter()
            if not buffer and not stamps and not chunk.startswith(b"HTTP/1.1 200"):
                raise RuntimeError(f"{path}: {chunk[:300]!r}")
            buffer += chunk
            while b"\n\n" in buffer:
                event, buffer = buffer.split(b"\n\n", 1)
                if piece in event and b'"content":""' not in event:
                    stamps.append(now)
                if any(mark in event for mark in end):
                    done, last = True, event
    span = stamps[-1] - stamps[0] if len(stamps) > 1 else 0.0
    return {"ttft_ms": (stamps[0] - start) * 1e3 if stamps else 0.0, "pieces": len(stamps),
            "decode_tps": (len(stamps) - 1) / span if span > 0 else 0.0, "last": last.decode(errors="replace")}


def chain(host: str, port: int, turns: int, gen: int, named: bool) -> list[float]:
    """Each turn's TTFT over /v1/responses: naming the last response, or sending the whole history again."""
    history: list[dict] = []
    previous = None
    ttfts = []
    for turn in range(turns):
        text = f"Turn {turn}: tell me more about rivers and the sea."
        payload = {"stream": True, "temperature": 0, "ignore_eos": True, "max_output_tokens": gen}
        if named:
            payload |= {"input": text, **({"previous_response_id": previous} if previous else {})}
        else:
            payload |= {"input": [*history, {"role": "user", "content": text}], "store": False}
        run = stream(host, port, "/v1/responses", payload, "responses")
        ttfts.append(run["ttft_ms"])
        response = json.loads(run["last"].split("data: ", 1)[1])["response"]
        previous = response["id"]
        answer = "".join(p["text"] for item in response["output"] if item["type"] == "message" for p in item["content"])
        history += [{"role": "user", "content": text}, {"role": "assistant", "content": answer}]
    return ttfts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--gen", type=int, default=128)
    parser.add_argument("--iters", type=int, default=9)
    parser.add_argument("--turns", type=int, default=6)
    args = parser.parse_args()

    from mnn_engine import Engine, ModelStore
    from mnn_engine.cli.bench import TEXT

    model = args.model or str(test_model("smollm2-135m"))
    engine = Engine(ModelStore(tempfile.mkdtemp(prefix="mnn-bench-")))
    engine.load(model, threads=args.threads)
    parts = urllib.parse.urlsplit(engine.start_server(port=0))
    with urllib.request.urlopen(f"{parts.scheme}://{parts.netloc}/v1/models") as answer:
        served = json.load(answer)["data"][0]["id"]  # Anthropic's route must name it
    host, port = parts.hostname, parts.port
    client = multiprocessing.get_context("spawn").Pool(1)  # the client in its own process, as a real one

    def run(route: str, text: str, gen: int) -> dict:
        path, payload = body(route, text, gen, served)
        return client.apply(stream, (host, port, path, payload, route))

    try:
        for route in ROUTES:
            run(route, "Hi", 4)
        decode: dict[str, list[float]] = {r: [] for r in ROUTES}
        ttft: dict[str, list[float]] = {r: [] for r in ROUTES}
        for i in range(args.iters):
            for route in ROUTES[i % 3:] + ROUTES[:i % 3]:  # each route first in turn
                decode[route].append(run(route, TEXT, args.gen)["decode_tps"])
        for i in range(15):
            for route in ROUTES[i % 3:] + ROUTES[:i % 3]:
                ttft[route].append(run(route, "Hi", 4)["ttft_ms"])
        named = client.apply(chain, (host, port, args.turns, 16, True))
        resent = client.apply(chain, (host, port, args.turns, 16, False))
    finally:
        client.close()
        engine.close()
    result = {"machine": machine(), "model": model, "threads": args.threads, "gen": args.gen, "iters": args.iters,
              "decode_tps": {r: median(v) for r, v in decode.items()},
              "short_prompt_ttft_ms": {r: median(v) for r, v in ttft.items()},
              "samples": {"decode_tps": decode, "ttft_ms": ttft},
              "chain_ttft_ms": {"previous_response_id": named, "whole_history": resent}}
    for route in ("responses", "messages"):
        result[f"{route}_over_chat_decode_paired"] = paired_ratio(decode[route], decode["chat"])
        result[f"{route}_minus_chat_ttft_ms"] = median([a - b for a, b in zip(ttft[route], ttft["chat"], strict=True)])
        print(f"{route}: decode {result['decode_tps'][route]:.2f} tok/s vs chat {result['decode_tps']['chat']:.2f} "
              f"(paired ratio {result[f'{route}_over_chat_decode_paired']:.3f}, target >= 0.98); TTFT "
              f"{result[f'{route}_minus_chat_ttft_ms']:+.2f} ms against chat (paired, short prompt; target <= +5)")
    print("chain TTFT per turn (ms), previous_response_id:", " ".join(f"{t:.0f}" for t in named))
    print("chain TTFT per turn (ms), whole history again:  ", " ".join(f"{t:.0f}" for t in resent))
    save("agent_apis", result)


if __name__ == "__main__":
    main()
