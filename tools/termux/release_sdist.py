#!/usr/bin/env python3
"""Build mnn-engine's release source, the sdist the python-mnn-engine recipe
downloads; check that it builds offline against an installed MNN (system
mode, as the recipe builds it against the mnn package); write its SHA-256
into the recipe.

    python3 tools/termux/release_sdist.py --mnn-prefix DIR [--out dist] [--recipe FILE] [--no-write]

DIR is an installed MNN (include/MNN, include/llm, lib/libMNN.so), as the
Termux mnn package installs it. The sdist is meson-python's (``meson dist``
of the committed tree: what is not committed is not in it). What a
maintainer then publishes is in docs/termux.md ("Releasing").
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
RECIPE = REPO / "packaging" / "termux" / "python-mnn-engine" / "build.sh"
#: where the release is published (the recipe's TERMUX_PKG_SRCURL, with its version)
RELEASE_URL = ("https://github.com/mnn-engine/mnn-engine/releases/download/"
               "v${TERMUX_PKG_VERSION}/mnn_engine-${TERMUX_PKG_VERSION}.tar.gz")
#: what the wheel built from the sdist must hold (the package, its page, the core)
MUST_HOLD = ("mnn_engine/__init__.py", "mnn_engine/server/static/chat.js",
             "mnn_engine/server/static/vendor/VERSIONS.json", "mnn_engine/hub/catalog.json")


def _system_args(prefix: Path) -> list[str]:
    return ["-Dmnn=system", f"-Dmnn_prefix={prefix}"]


def _run(what: str, args: list[str], **env: str) -> str:
    """Run ``args`` with this environment's tools first on PATH (meson-python
    runs the ``meson`` it finds there); its output, or SystemExit saying why."""
    path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    done = subprocess.run(args, cwd=REPO, capture_output=True, text=True, env=dict(os.environ, PATH=path, **env))
    if done.returncode != 0:
        raise SystemExit(f"{what} failed:\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
    return done.stdout


def build_sdist(out: Path, prefix: Path) -> Path:
    """meson-python's sdist of the committed tree (configured in system mode: no MNN build)."""
    out.mkdir(parents=True, exist_ok=True)
    code = ("import json, sys, mesonpy; "
            "print(mesonpy.build_sdist(sys.argv[1], {'setup-args': json.loads(sys.argv[2])}))")
    done = _run("meson-python's sdist", [sys.executable, "-c", code, str(out), json.dumps(_system_args(prefix))])
    return out / done.strip().splitlines()[-1]


def check_offline_build(sdist: Path, prefix: Path) -> dict[str, object]:
    """Build a wheel from the sdist with no index and no build isolation (the
    build tools are this environment's), against ``prefix``; what it holds."""
    with tempfile.TemporaryDirectory() as tmp:
        with tarfile.open(sdist) as tar:
            names = tar.getnames()
        if any("/subprojects/MNN/" in n for n in names):
            raise SystemExit(f"{sdist.name} carries an MNN source tree")
        _run("the offline build of the sdist",
             [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
              "-w", tmp, *[f"-Csetup-args={a}" for a in _system_args(prefix)], str(sdist)], PIP_NO_INDEX="1")
        (wheel,) = Path(tmp).glob("mnn_engine-*.whl")
        with zipfile.ZipFile(wheel) as z:
            held = set(z.namelist())
            info = json.loads(z.read(next(n for n in held if n.endswith("_build_info.json"))))
    missing = [m for m in MUST_HOLD if m not in held]
    if not any(re.match(r"mnn_engine/_mnn\..*\.so$", n) for n in held):
        missing.append("mnn_engine/_mnn.*.so")
    if missing:
        raise SystemExit(f"the wheel built from {sdist.name} lacks {', '.join(missing)}")
    if info.get("mode") != "system":
        raise SystemExit(f"the wheel built from {sdist.name} is mode {info.get('mode')!r}, not system")
    return {"wheel": wheel.name, "files": len(held), "mode": info["mode"], "mnn_version": info.get("mnn_version")}


def write_recipe(recipe: Path, sha256: str) -> None:
    """The recipe downloads the release sdist and checks it."""
    text = recipe.read_text()
    text = re.sub(r"(?m)^TERMUX_PKG_SRCURL=.*$", f"TERMUX_PKG_SRCURL={RELEASE_URL}", text)
    text = re.sub(r"(?m)^TERMUX_PKG_GIT_BRANCH=.*\n", "", text)
    if re.search(r"(?m)^TERMUX_PKG_SHA256=", text):
        text = re.sub(r"(?m)^TERMUX_PKG_SHA256=.*$", f"TERMUX_PKG_SHA256={sha256}", text)
    else:
        text = re.sub(r"(?m)^(TERMUX_PKG_SRCURL=.*)$", rf"\1\nTERMUX_PKG_SHA256={sha256}", text)
    recipe.write_text(text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mnn-prefix", type=Path, required=True, help="an installed MNN (include/, lib/libMNN.so)")
    parser.add_argument("--out", type=Path, default=REPO / "dist")
    parser.add_argument("--recipe", type=Path, default=RECIPE)
    parser.add_argument("--no-write", action="store_true", help="check only; leave the recipe as it is")
    args = parser.parse_args(argv)
    prefix = args.mnn_prefix.resolve()
    if not (prefix / "lib" / "libMNN.so").is_file() or not (prefix / "include" / "llm").is_dir():
        raise SystemExit(f"{prefix} is not an installed MNN (lib/libMNN.so, include/MNN, include/llm)")
    if shutil.which("git") and subprocess.run(["git", "status", "--porcelain"], cwd=REPO, capture_output=True,
                                              text=True).stdout.strip():
        print("note: the tree has uncommitted changes; the sdist holds the committed tree only", file=sys.stderr)
    sdist = build_sdist(args.out, prefix)
    sha256 = hashlib.sha256(sdist.read_bytes()).hexdigest()
    report = {"sdist": str(sdist), "sha256": sha256, "bytes": sdist.stat().st_size,
              "offline_build": check_offline_build(sdist, prefix)}
    if not args.no_write:
        write_recipe(args.recipe, sha256)
        report["recipe"] = str(args.recipe)
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
