"""The README's Jupyter commands, run as written after the install it
documents (the ``notebook`` extra, which ``[test]`` includes)."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import nbformat
import pytest
from support import REPO, SCRIPTED_TEXT, test_model_dir

BIN = Path(sys.executable).parent


def _commands() -> list[str]:
    section = (REPO / "README.md").read_text().split("## Jupyter", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```sh\n(.*?)```", section, re.S)
    assert block, "the README's Jupyter section has no commands"
    return [line for line in block.group(1).splitlines() if line.strip()]


def _argv(command: str) -> list[str]:
    words = shlex.split(command)
    assert words[0].startswith(".venv/bin/"), command
    return [str(BIN / words[0].removeprefix(".venv/bin/")), *words[1:]]


@pytest.fixture
def env(tmp_path):
    if os.geteuid() == 0:  # CI runs as root, which Jupyter's server refuses unless told (a user is not root)
        (tmp_path / "config").mkdir()
        (tmp_path / "config" / "jupyter_server_config.json").write_text('{"ServerApp": {"allow_root": true}}')
    return dict(os.environ, MNN_ENGINE_HOME=str(tmp_path / "home"), BROWSER="true",  # no browser opens
                MNN_ENGINE_EXAMPLE_MODEL=str(test_model_dir("tiny-scripted")),
                JUPYTER_RUNTIME_DIR=str(tmp_path / "runtime"), JUPYTER_CONFIG_DIR=str(tmp_path / "config"),
                PATH=f"{BIN}{os.pathsep}{os.environ['PATH']}")


def test_nbconvert_executes_the_quickstart_as_written(env):
    (command,) = [c for c in _commands() if " nbconvert " in c]
    done = subprocess.run(_argv(command), cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    written = re.search(r"Writing \d+ bytes to (\S+)", done.stderr)
    assert written, done.stderr
    notebook = nbformat.read(written.group(1), as_version=4)
    shown = json.dumps([cell.get("outputs", []) for cell in notebook.cells], ensure_ascii=False)
    assert "widget: " + SCRIPTED_TEXT in shown
    assert "MissingIDFieldWarning" not in done.stderr


def test_jupyter_lab_serves_the_examples_as_written(env):
    (command,) = [c for c in _commands() if " lab " in c]
    server = subprocess.Popen(_argv(command), cwd=REPO, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)
    try:
        deadline, seen = time.monotonic() + 120, []
        url = None
        while url is None:
            assert time.monotonic() < deadline and server.poll() is None, "".join(seen)
            line = server.stdout.readline()
            seen.append(line)
            found = re.search(r"(http://127\.0\.0\.1:\d+)/lab\?token=(\w+)", line)  # loopback only
            if found:
                url = found
        base, token = url.group(1), url.group(2)
        listed = None
        while listed is None:  # Jupyter Server prints its URL a moment before it listens
            try:
                with urllib.request.urlopen(f"{base}/api/contents/quickstart.ipynb?token={token}", timeout=30) as got:
                    listed = json.load(got)
            except urllib.error.URLError:
                assert time.monotonic() < deadline and server.poll() is None
                time.sleep(0.1)
        assert listed["type"] == "notebook" and listed["content"]["cells"]
        with urllib.request.urlopen(f"{base}/lab?token={token}", timeout=30) as answer:
            assert answer.status == 200 and b"JupyterLab" in answer.read()
    finally:
        server.terminate()
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            server.kill()
