#!/usr/bin/env python3
"""The third red-team round's figures, measured again after its fixes (issue 42).

Usage: python tools/bench/hardening_round_three.py [--fuzz 200]

Against a real server on loopback (tiny-scripted for the connection attack,
tiny-vision for the images):

- 70 chat requests whose bodies stall after 6 bytes (``Content-Length: 1000``):
  whether ``/health`` and a chat are served meanwhile and how long each takes,
  and how long the server keeps the stalled connections;
- the 97-byte PNG whose zlib stream is cut in a deflate block (MNN's stb_image
  looped on it for good) and the other malformed PNGs: the answers and their times;
- ``--fuzz`` images with bytes flipped or cut (a PNG, a JPEG, a BMP): how many
  are answered, refused, or anything else;
- what decoding costs (``runtime/image_decode.decode_image``: Pillow's full decode
  and the BMP written for MNN), per image size.

Writes bench-results/hardening_round_three.json.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import http.client
import io
import json
import random
import socket
import tempfile
import time
from pathlib import Path

from common import machine, save, test_model  # tools/bench is on sys.path (and tests/, by common)
from media_samples import MALFORMED_PNGS, bmp, png  # the tests' own samples

from mnn_engine import Engine, ModelStore
from mnn_engine.runtime.image_decode import decode_image


def _post(url: str, path: str, payload: dict) -> tuple[int, float, dict]:
    host, port = url.removeprefix("http://").split(":")
    started = time.perf_counter()
    conn = http.client.HTTPConnection(host, int(port), timeout=120)
    try:
        conn.request("POST", path, json.dumps(payload), {"Content-Type": "application/json"})
        response = conn.getresponse()
        body = response.read()
        return response.status, time.perf_counter() - started, json.loads(body or b"{}")
    finally:
        conn.close()


def _get(url: str, path: str) -> tuple[int, float]:
    host, port = url.removeprefix("http://").split(":")
    started = time.perf_counter()
    conn = http.client.HTTPConnection(host, int(port), timeout=120)
    try:
        conn.request("GET", path)
        status = conn.getresponse().status
        return status, time.perf_counter() - started
    finally:
        conn.close()


def stalled_bodies(url: str) -> dict:
    host, port = url.removeprefix("http://").split(":")
    held = []
    for _ in range(70):
        conn = socket.create_connection((host, int(port)), timeout=30)
        conn.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 1000\r\n\r\n{\"mess")
        held.append(conn)
    opened = time.perf_counter()
    time.sleep(0.3)
    health = [_get(url, "/health") for _ in range(3)]
    chats = [_post(url, "/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}],
                                                   "max_tokens": 4})[:2] for _ in range(3)]
    closed_after = []
    for conn in held:
        conn.settimeout(150)
        with contextlib.suppress(OSError):  # a reset is a close too
            conn.recv(1)
        closed_after.append(time.perf_counter() - opened)
        conn.close()
    return {"health": [{"status": s, "seconds": round(t, 3)} for s, t in health],
            "chat": [{"status": s, "seconds": round(t, 3)} for s, t in chats],
            "stalled_closed_by_server_after_s": {"first": round(min(closed_after), 2),
                                                  "last": round(max(closed_after), 2)}}


def _ask(url: str, image: bytes) -> tuple[int, float, dict]:
    part = {"type": "image_url", "image_url": {"url": "data:image/png;base64," + base64.b64encode(image).decode()}}
    return _post(url, "/v1/chat/completions", {"messages": [{"role": "user", "content": [
        {"type": "text", "text": "What is it?"}, part]}], "max_tokens": 1})


def malformed(url: str) -> dict:
    out = {}
    for name, data in MALFORMED_PNGS.items():
        status, seconds, body = _ask(url, data)
        out[name] = {"bytes": len(data), "status": status, "seconds": round(seconds, 4),
                     "message": body.get("error", {}).get("message", "")[:160]}
    return out


def _jpeg(width: int, height: int) -> bytes:
    from PIL import Image

    out = io.BytesIO()
    Image.linear_gradient("L").resize((width, height)).convert("RGB").save(out, format="JPEG")
    return out.getvalue()


def fuzz(url: str, count: int) -> dict:
    rng = random.Random(42)
    originals = [png(40, 30, pattern=True), _jpeg(40, 30), bmp(40, 30)]
    counts: dict[str, int] = {}
    for _ in range(count):
        data = bytearray(rng.choice(originals))
        for _ in range(rng.randint(1, 3)):
            at = rng.randrange(len(data))
            if rng.random() < 0.5:
                data[at] ^= rng.randrange(1, 256)
            else:
                del data[at:at + rng.randint(1, 32)]
        status = str(_ask(url, bytes(data))[0])
        counts[status] = counts.get(status, 0) + 1
    return counts


def decode_costs() -> list[dict]:
    from PIL import Image

    rows = []
    for width, height in ((640, 480), (1920, 1080), (3000, 2000), (4096, 4096)):
        image = Image.linear_gradient("L").resize((width, height)).convert("RGB")
        for fmt in ("PNG", "JPEG"):
            buffer = io.BytesIO()
            image.save(buffer, format=fmt)
            data = buffer.getvalue()
            times = []
            for _ in range(3):
                started = time.perf_counter()
                out = decode_image(data)
                times.append(time.perf_counter() - started)
            rows.append({"size": f"{width}x{height}", "format": fmt, "input_bytes": len(data),
                         "bmp_bytes": len(out), "decode_and_bmp_ms": round(1000 * min(times), 1)})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fuzz", type=int, default=200)
    args = parser.parse_args()
    results: dict = {"machine": machine()}
    with tempfile.TemporaryDirectory() as home:
        engine = Engine(ModelStore(Path(home) / "a"))
        engine.load(str(test_model("tiny-scripted")), threads=1)
        url = engine.start_server(port=0)
        results["stalled_bodies"] = stalled_bodies(url)
        engine.close()
        engine = Engine(ModelStore(Path(home) / "b"))
        engine.load(str(test_model("tiny-vision")), threads=1)
        url = engine.start_server(port=0)
        results["malformed_pngs"] = malformed(url)
        results["fuzzed_images"] = fuzz(url, args.fuzz)
        engine.close()
    results["decode_costs"] = decode_costs()
    print(json.dumps(results, indent=1))
    save("hardening_round_three", results)


if __name__ == "__main__":
    main()
