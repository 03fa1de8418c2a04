#!/usr/bin/env python3
"""Soak and fault run against a real `serve` process on loopback.

Usage: python tools/soak.py [--model DIR] [--generations 500] [--disconnects 200]
                            [--concurrent 100] [--signals 6] [--kills 4]

Phases (each bounded in count and time, loopback only):
1. generations: streamed and non-streamed chat completions, one after another;
2. disconnects: streams dropped by the client after the first chunk;
3. concurrency: while one long generation runs, N requests at once, each must
   get 429 at once;
4. signals: SIGTERM / SIGINT during a stream (clean exit, code 0) and SIGKILL
   (the next start serves again);
5. kills: kill -9 during `models import` and during a load; afterwards the
   store lists only complete models and each still loads.
It prints a table (requests, errors, faults survived, RSS and fd drift of the
server across phases 1-3) and exits non-zero if anything was lost.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import http.client
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
from support import test_model_dir  # noqa: E402


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, home: Path, model: str) -> None:
        self.port = free_port()
        self.log = open(home / f"serve-{self.port}.log", "w+")  # noqa: SIM115 (closed in stop)
        self.proc = subprocess.Popen([sys.executable, "-m", "mnn_engine", "serve", model, "--port", str(self.port),
                                      "--threads", "1"], stdout=self.log, stderr=self.log, cwd="/",
                                     env={**os.environ, "MNN_ENGINE_HOME": str(home)})
        deadline = time.monotonic() + 180
        while not self.ready():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(Path(self.log.name).read_text()[-2000:])
            time.sleep(0.1)

    def ready(self) -> bool:
        try:
            return self.get("/health")[0] == 200
        except OSError:
            return False

    def get(self, path: str) -> tuple[int, bytes]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        try:
            conn.request("GET", path)
            r = conn.getresponse()
            return r.status, r.read()
        finally:
            conn.close()

    def chat(self, stream: bool, max_tokens: int = 8, drop_after_first: bool = False, **extra) -> int:
        body = json.dumps({"messages": [{"role": "user", "content": "hi"}], "stream": stream,
                           "max_tokens": max_tokens, **extra})
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
        try:
            conn.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
            r = conn.getresponse()
            if drop_after_first:
                r.read1(64)
                conn.sock.close()
                return r.status
            r.read()
            return r.status
        finally:
            conn.close()

    def rss_kib(self) -> int:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        return 0

    def fds(self) -> int:
        return len(os.listdir(f"/proc/{self.proc.pid}/fd"))

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30) -> int | None:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = None
        self.log.close()
        return code


def wait_idle(server: Server, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while json.loads(server.get("/health")[1])["generation"]["state"] != "idle":
        if time.monotonic() > deadline:
            raise RuntimeError("the generation did not end")
        time.sleep(0.005)


def wait_generating(server: Server, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while json.loads(server.get("/health")[1])["generation"]["state"] == "idle":
        if time.monotonic() > deadline:
            raise RuntimeError("the generation did not start")
        time.sleep(0.005)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=None)
    ap.add_argument("--generations", type=int, default=500)
    ap.add_argument("--disconnects", type=int, default=200)
    ap.add_argument("--concurrent", type=int, default=100)
    ap.add_argument("--signals", type=int, default=6)
    ap.add_argument("--kills", type=int, default=4)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    model = args.model or str(test_model_dir("tiny"))
    rows: list[tuple[str, int, int, str]] = []  # phase, requests, errors (unexpected), note
    lost: list[str] = []
    home = Path(tempfile.mkdtemp(prefix="mnn-engine-soak-"))

    server = Server(home, model)
    for _ in range(5):  # warm up before the baseline
        server.chat(stream=False)
    rss0, fds0 = server.rss_kib(), server.fds()
    started = time.monotonic()
    statuses = [server.chat(stream=i % 2 == 0, max_tokens=rng.randint(1, 16)) for i in range(args.generations)]
    rows.append(("generations", len(statuses), sum(s != 200 for s in statuses),
                 f"{time.monotonic() - started:.0f} s"))
    statuses = []
    for _ in range(args.disconnects):  # each after the last one's cancel took effect (else: 429, by design)
        wait_idle(server)
        statuses.append(server.chat(stream=True, max_tokens=64, ignore_eos=True, drop_after_first=True))
    time.sleep(0.5)
    idle = json.loads(server.get("/health")[1])["generation"]["state"] == "idle"
    rows.append(("mid-stream disconnects", len(statuses), sum(s != 200 for s in statuses),
                 "generation idle after" if idle else "GENERATION STILL RUNNING"))
    if not idle:
        lost.append("a disconnected stream kept generating")
    with concurrent.futures.ThreadPoolExecutor(max_workers=min(args.concurrent, 32) + 1) as pool:
        long = pool.submit(server.chat, False, 3000, ignore_eos=True)
        wait_generating(server)
        t0 = time.monotonic()
        codes = list(pool.map(lambda _: server.chat(stream=False), range(args.concurrent)))
        burst = time.monotonic() - t0
        long_status = long.result()
    rows.append(("concurrent requests (429)", len(codes), sum(c != 429 for c in codes),
                 f"all answered in {burst:.2f} s; the long one {long_status}"))
    rss1, fds1 = server.rss_kib(), server.fds()
    code = server.stop()
    rows.append(("SIGTERM after the soak", 1, int(code != 0), f"exit {code}"))

    faults = 0
    for i in range(args.signals):
        sig = [signal.SIGTERM, signal.SIGINT, signal.SIGKILL][i % 3]
        server = Server(home, model)
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            stream = pool.submit(server.chat, True, 2000, ignore_eos=True)
            wait_generating(server)
            time.sleep(rng.uniform(0, 0.5))
            code = server.stop(sig)
            with contextlib.suppress(Exception):  # the stream is cut: that is the point
                stream.result(30)
        ok = code == (-signal.SIGKILL if sig == signal.SIGKILL else 0)
        faults += ok
        if not ok:
            lost.append(f"{signal.Signals(sig).name} during a stream: exit {code}")
    rows.append(("signals during streams", args.signals, args.signals - faults,
                 "TERM/INT: exit 0; KILL: the next start serves"))

    store_env = {**os.environ, "MNN_ENGINE_HOME": str(home)}
    big = str(test_model_dir("smollm2-135m"))
    kills = 0
    for i in range(args.kills):
        during_import = i % 2 == 0
        cmd = ([sys.executable, "-m", "mnn_engine", "models", "import", big, "--id", f"m{i}"] if during_import
               else [sys.executable, "-m", "mnn_engine", "serve", big, "--port", str(free_port())])
        proc = subprocess.Popen(cmd, env=store_env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd="/")
        time.sleep(rng.uniform(0.3, 2.0))
        proc.kill()
        proc.wait()
        kills += 1
    models = home / "models"  # what the kills left, before an import or a listing cleans it up
    half = [p.name for p in models.iterdir() if p.name.startswith(".")] if models.is_dir() else []
    done = subprocess.run([sys.executable, "-m", "mnn_engine", "models", "import", big, "--id", "after-kills"],
                          env=store_env, capture_output=True, text=True, cwd="/")
    if done.returncode != 0:
        lost.append(f"an import after the kills failed: {done.stderr[-300:]}")
    listed = json.loads(subprocess.run([sys.executable, "-m", "mnn_engine", "models", "list", "--json"],
                                       env=store_env, capture_output=True, text=True, cwd="/").stdout)
    for entry in listed:
        check = subprocess.run([sys.executable, "-m", "mnn_engine", "generate", entry["id"], "hi", "--max-tokens",
                                "2"], env=store_env, capture_output=True, text=True, cwd="/")
        if check.returncode != 0:
            lost.append(f"model {entry['id']} listed but does not load: {check.stderr[-300:]}")
    server = Server(home, model)  # serves again after all of it
    server.chat(stream=False)
    server.stop()
    leftovers = [p.name for p in models.iterdir() if p.name.startswith(".")]
    rows.append(("kill -9 during import/load", kills, len(lost),
                 f"then an import: {len(listed)} complete model(s) listed, all load; staging dirs left by the "
                 f"kills: {len(half)}, after the next import: {len(leftovers)}"))

    print(f"{'phase':30} {'requests':>9} {'errors':>7}  note")
    for phase, n, errors, note in rows:
        print(f"{phase:30} {n:9d} {errors:7d}  {note}")
    print(f"server RSS {rss0 / 1024:.1f} -> {rss1 / 1024:.1f} MiB ({(rss1 - rss0) / max(rss0, 1) * 100:+.1f} %), "
          f"fds {fds0} -> {fds1} ({fds1 - fds0:+d})")
    print("nothing lost" if not lost else "LOST: " + "; ".join(lost))
    return 1 if lost or any(errors for _, _, errors, _ in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
