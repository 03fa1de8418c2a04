"""What the replayed Termux packages do once installed (run by tools/termux/replay.sh
inside the arm64 root, under qemu-aarch64, with the packages at Termux's prefix).

Usage: python device_probe.py PREFIX MODEL_DIR PACKAGE...

Prints one JSON line: where mnn-engine and libMNN were loaded from, the build
info, the backend capabilities, a greedy answer, per GPU backend what
mnn-engine says with and without its subpackage, and a request to the service
script (termux-services' run script) serving MODEL_DIR; ``problems`` lists
every expectation that did not hold.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

PORT = 18081
SCRIPTED_ANSWER = "Hello! I am a tiny MNN test model"


def probe_backends(packages: list[str], problems: list[str]) -> dict[str, object]:
    from mnn_engine import MnnEngineError
    from mnn_engine.runtime import build

    report: dict[str, object] = {}
    for backend in build.BACKEND_LIBRARIES:
        installed = f"mnn-backend-{backend}" in packages
        entry: dict[str, object] = {"subpackage": installed, "library": str(build.backend_library(backend))}
        try:
            build.require_backend(backend)
            entry["require"] = "ok"
        except MnnEngineError as exc:
            entry["require"] = str(exc)
        entry["loads"] = build.load_backend_library(backend)
        if entry["loads"] != installed:
            problems.append(f"{backend}: library loads={entry['loads']} with the subpackage installed={installed}")
        expected = "not usable on this device" if installed else f"pkg install mnn-backend-{backend}"
        if expected not in str(entry["require"]):
            problems.append(f"{backend}: require_backend said {entry['require']!r}, expected {expected!r}")
        report[backend] = entry
    return report


def probe_service(prefix: str, model: str, problems: list[str]) -> dict[str, object]:
    env_file = Path(prefix, "etc/mnn-engine/serve.env")
    text = env_file.read_text()
    text = text.replace("MNN_ENGINE_MODEL=\n", f"MNN_ENGINE_MODEL={model}\n")
    text = text.replace("MNN_ENGINE_PORT=8081", f"MNN_ENGINE_PORT={PORT}")
    env_file.write_text(text)
    service = subprocess.Popen([f"{prefix}/libexec/mnn-engine/serve"], stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, start_new_session=True,
                               env={"PATH": "/usr/bin:/bin", "PYTHONPATH": os.environ.get("PYTHONPATH", "")})
    report: dict[str, object] = {}
    try:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline and service.poll() is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{PORT}/health", timeout=5) as response:
                    report["health"] = json.load(response)
                if report["health"].get("model", {}).get("state") == "loaded":
                    break
            except OSError:
                pass
            time.sleep(2)
        body = json.dumps({"model": "any", "temperature": 0, "max_tokens": 24,
                           "messages": [{"role": "user", "content": "Who are you?"}]}).encode()
        request = urllib.request.Request(f"http://127.0.0.1:{PORT}/v1/chat/completions", data=body,
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=600) as response:
            report["answer"] = json.load(response)["choices"][0]["message"]["content"]
    except OSError as exc:
        report["error"] = str(exc)
    finally:
        if service.poll() is None:
            os.killpg(service.pid, signal.SIGTERM)
        report["log_tail"] = service.communicate(timeout=60)[0].decode(errors="replace").splitlines()[-5:]
    if SCRIPTED_ANSWER not in str(report.get("answer")):
        problems.append(f"the service did not answer: {report}")
    return report


def main() -> None:
    prefix, model, *packages = sys.argv[1:]
    problems: list[str] = []
    import mnn_engine
    from mnn_engine import Llm, backend_capabilities
    from mnn_engine.runtime import build

    report: dict[str, object] = {"packages": packages, "mnn_engine": mnn_engine.__file__,
                                 "build_info": mnn_engine.build_info()}
    if not mnn_engine.__file__.startswith(f"{prefix}/lib/"):
        problems.append(f"mnn_engine imported from {mnn_engine.__file__}")
    with Llm(model, thread_num=2) as llm:
        report["greedy"] = llm.generate([{"role": "user", "content": "Who are you?"}], temperature=0,
                                        max_tokens=24).text
        report["libMNN"] = str(build.mapped_library_dir("libMNN.so"))
    if report["libMNN"] != f"{prefix}/lib":
        problems.append(f"libMNN.so loaded from {report['libMNN']}")
    if SCRIPTED_ANSWER not in report["greedy"]:
        problems.append(f"greedy answer {report['greedy']!r}")
    report["capabilities"] = backend_capabilities()
    report["backends"] = probe_backends(packages, problems)
    report["service"] = probe_service(prefix, model, problems)
    report["problems"] = problems
    print(json.dumps(report))


if __name__ == "__main__":
    main()
