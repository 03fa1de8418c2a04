#!/usr/bin/env python3
"""Peak memory of the mnn-engine server during a generation versus MNN alone.

Usage: python tools/bench/memory.py [--model DIR] [--threads 2] [--gen 128]

Two fresh processes on the same model: (1) ``python -m mnn_engine serve``
answering one streamed request of ``--gen`` tokens; (2) MNN's own Python
binding (``MNN.llm``) loading the model and generating the same number of
tokens. Peak resident memory (VmHWM) of each; target: the server uses at
most 40 MiB more.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
import urllib.request

from common import machine, save, test_model, vm_hwm_mib  # tools/bench is on sys.path

MNN_ALONE = textwrap.dedent("""
    import sys
    sys.modules["MNN.tools.utils.log"] = None
    import MNN.llm as llm
    model = llm.create(sys.argv[1] + "/config.json")
    model.set_config({"thread_num": int(sys.argv[2]), "sampler_type": "greedy"})
    model.load()
    model.response("Tell me a long story about rivers.", False)
    model.generate_init()
    ids = model.tokenizer_encode(model.apply_chat_template("Tell me a long story about rivers."))
    out = model._c_obj.generate(ids, int(sys.argv[3]))
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            print(int(line.split()[1]) / 1024)
""")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def server_peak(model: str, threads: int, gen: int) -> float:
    port = free_port()
    env = dict(os.environ, MNN_ENGINE_HOME=tempfile.mkdtemp(prefix="mnn-bench-home-"))
    proc = subprocess.Popen([sys.executable, "-m", "mnn_engine", "serve", model, "--port", str(port),
                             "--threads", str(threads)], env=env, stderr=subprocess.PIPE, text=True, cwd="/")
    try:
        while "mnn-engine: serving" not in proc.stderr.readline():
            if proc.poll() is not None:
                raise SystemExit("the server did not start")
        body = json.dumps({"messages": [{"role": "user", "content": "Tell me a long story about rivers."}],
                           "stream": True, "max_tokens": gen, "ignore_eos": True, "temperature": 0}).encode()
        request = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions", data=body,
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=600) as response:
            response.read()
        time.sleep(0.2)
        return vm_hwm_mib(proc.pid)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)


def mnn_alone_peak(model: str, threads: int, gen: int) -> float:
    out = subprocess.run([sys.executable, "-c", MNN_ALONE, model, str(threads), str(gen)], capture_output=True,
                         text=True, check=True, cwd="/")
    return float(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--gen", type=int, default=128)
    args = parser.parse_args()
    model = args.model or str(test_model("qwen3-0.6b-shape"))
    mnn = mnn_alone_peak(model, args.threads, args.gen)
    server = server_peak(model, args.threads, args.gen)
    result = {"machine": machine(), "model": model, "threads": args.threads, "gen": args.gen,
              "mnn_alone_peak_mib": mnn, "server_peak_mib": server, "difference_mib": server - mnn}
    print(f"peak RSS: MNN alone {mnn:.0f} MiB, mnn-engine server {server:.0f} MiB, "
          f"difference {server - mnn:+.0f} MiB (target <= +40)")
    print(f"saved {save('memory', result)}")


if __name__ == "__main__":
    main()
