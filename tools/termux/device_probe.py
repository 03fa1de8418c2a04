"""What the replayed Termux packages do once installed (run by tools/termux/replay.sh
inside the arm64 root, under qemu-aarch64, with the packages installed by dpkg).

Usage: python device_probe.py PREFIX MODEL_DIR PACKAGE...

Prints one JSON line: where mnn-engine and libMNN were loaded from, the build
info, the backend capabilities, a greedy answer and, per GPU backend, what
mnn-engine says with and without its subpackage; ``problems`` lists every
expectation that did not hold. (The service is tried by device_packages.py.)
"""

from __future__ import annotations

import json
import sys

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
    report["problems"] = problems
    print(json.dumps(report))


if __name__ == "__main__":
    main()
