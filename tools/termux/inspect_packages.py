#!/usr/bin/env python3
"""Check what the replayed Termux packages hold (tools/termux/replay.sh).

Usage: inspect_packages.py PACKAGES_DIR PREFIX BUILD_PATH...

PACKAGES_DIR holds one directory per package (files relative to the prefix).
Checks: the expected files are in the right package; every ELF file is
AArch64 with RUNPATH PREFIX/lib and no path of the build machine; nothing in
mnn or python-mnn-engine needs a backend library (so the backend subpackages
stay optional); mnn-engine's extension links libMNN; its build info says
system mode; no ELF file asks for an executable stack; every library an ELF file needs is in one of the packages or is
the C/C++ runtime; no file holds a BUILD_PATH (the build machine's paths). Prints a JSON
report; exit status 1 when a check fails.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

EXPECTED = {
    "mnn": ["lib/libMNN.so", "lib/libMNN_Express.so", "lib/libllm.so", "lib/libMNNOpenCV.so", "lib/libMNNAudio.so",
            "include/MNN/Interpreter.hpp",
            "include/MNN/expr/Module.hpp", "include/llm/llm.hpp"],
    "mnn-backend-opencl": ["lib/libMNN_CL.so"],
    "mnn-backend-vulkan": ["lib/libMNN_Vulkan.so"],
    "python-mnn-engine": ["etc/mnn-engine/serve.env", "libexec/mnn-engine/serve"],
}
BACKEND_LIBRARIES = {Path(f).name for name, files in EXPECTED.items() if name.startswith("mnn-backend-") for f in files}
# what the system provides (glibc here; bionic, libc++ and liblog on Android)
SYSTEM_LIBRARIES = {"libc.so.6", "libm.so.6", "libdl.so.2", "libpthread.so.0", "libstdc++.so.6", "libgcc_s.so.1",
                    "ld-linux-aarch64.so.1", "libc.so", "libm.so", "libdl.so", "libc++_shared.so", "liblog.so",
                    "libandroid.so"}
# what the packages' Termux dependencies hold: libpython from `python` (termux_step_get_dependencies_python
# links python packages with -lpython3.X; Termux's CPython installs libpython3.X.so, Debian's, which the
# replay builds against, names it libpython3.X.so.1.0)
DEPENDENCY_LIBRARIES = re.compile(r"libpython3\.\d+\.so(\.1\.0)?")


def readelf(path: Path) -> dict[str, object]:
    out = subprocess.run(["aarch64-linux-gnu-readelf", "-h", "-l", "-d", "-W", str(path)], capture_output=True,
                         text=True).stdout
    machine = re.search(r"Machine:\s+(.+)", out)
    stack = re.search(r"GNU_STACK(?:\s+\S+){5}\s+([RWE ]+?)\s+0x", out)
    return {"machine": machine.group(1).strip() if machine else "?",
            "stack": stack.group(1).replace(" ", "") if stack else None,
            "needed": re.findall(r"\(NEEDED\)\s+Shared library: \[(.+?)\]", out),
            "runpath": re.findall(r"\((?:RUNPATH|RPATH)\)\s+Library (?:runpath|rpath): \[(.+?)\]", out)}


def is_elf(path: Path) -> bool:
    with path.open("rb") as f:
        return f.read(4) == b"\x7fELF"


def main(packages: Path, prefix: str, build_paths: list[str]) -> int:
    problems: list[str] = []
    report: dict[str, object] = {}
    provided = {p.name for p in packages.glob("*/lib/*.so")}
    for package in sorted(p for p in packages.iterdir() if p.is_dir()):
        files = sorted(str(p.relative_to(package)) for p in package.rglob("*") if p.is_file() or p.is_symlink())
        elves = {}
        for name in files:
            path = package / name
            if path.is_file() and not path.is_symlink() and is_elf(path):
                info = readelf(path)
                elves[name] = info
                if info["machine"] != "AArch64":
                    problems.append(f"{package.name}/{name}: machine {info['machine']}")
                if info["stack"] != "RW":  # an executable stack: glibc 2.41+ refuses to load it
                    problems.append(f"{package.name}/{name}: stack {info['stack']}")
                if info["runpath"] != [f"{prefix}/lib"]:
                    problems.append(f"{package.name}/{name}: RUNPATH {info['runpath']}, not {prefix}/lib")
                if package.name in ("mnn", "python-mnn-engine") and BACKEND_LIBRARIES & set(info["needed"]):
                    problems.append(f"{package.name}/{name} needs {BACKEND_LIBRARIES & set(info['needed'])}")
                missing = {n for n in set(info["needed"]) - provided - SYSTEM_LIBRARIES
                           if not DEPENDENCY_LIBRARIES.fullmatch(n)}
                if missing:
                    problems.append(f"{package.name}/{name} needs {sorted(missing)}, which no package holds")
            if path.is_file() and not path.is_symlink():
                content = path.read_bytes()
                problems += [f"{package.name}/{name} holds {b}, a path of the build machine"
                             for b in build_paths if b.encode() in content]
        for expected in EXPECTED.get(package.name, []):
            if expected not in files:
                problems.append(f"{package.name} has no {expected}")
        entry: dict[str, object] = {"files": len(files), "elf": elves}
        if package.name == "python-mnn-engine":
            extension = [n for n in elves if re.search(r"mnn_engine/_mnn\..*\.so$", n)]
            infos = [p for p in package.rglob("_build_info.json")]
            if not extension or not {"libMNN.so", "libllm.so"} & set(elves[extension[0]]["needed"]):
                problems.append("python-mnn-engine: the extension links neither libllm.so nor libMNN.so")
            if not infos:
                problems.append("python-mnn-engine: no _build_info.json")
            else:
                entry["build_info"] = json.loads(infos[0].read_text())
                if entry["build_info"]["mode"] != "system":
                    problems.append("python-mnn-engine: not built in system mode")
        report[package.name] = entry
    for name in EXPECTED:
        if name not in report:
            problems.append(f"no package {name}")
    report["problems"] = problems
    print(json.dumps(report, indent=1))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]), sys.argv[2], sys.argv[3:]))
