"""The README's Python examples, run as written (issue 30: "every example in
the README runs in a test"), with only what cannot be here replaced: the
phone's model paths and names become the generated test models'. A block that
is a fragment of the one before it (no imports of its own) runs after it."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
from support import REPO, test_model_dir

from mnn_engine import ModelStore


def _blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", (REPO / "README.md").read_text(), re.S)


def test_the_readme_has_python_examples():
    assert len(_blocks()) >= 5


@pytest.fixture
def home(tmp_path):
    """A store holding the test model under the README's name for it."""
    ModelStore(tmp_path).import_model(test_model_dir("tiny-scripted"), model_id="qwen3-0-6b")
    return tmp_path


def _run(code: str, home, timeout: float = 120) -> subprocess.CompletedProcess:
    env = dict(os.environ, MNN_ENGINE_HOME=str(home))
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=timeout,
                          cwd=str(home))


def _as_here(code: str) -> str:
    model = str(test_model_dir("tiny-scripted"))
    return (code.replace("~/models/qwen3-0.6b-tone", str(test_model_dir("tiny-scripted-lora")))
            .replace("~/models/Qwen3-0.6B-MNN", model).replace("~/Download/Qwen3-0.6B-MNN", model)
            .replace("port=8081", "port=0").replace("127.0.0.1:8081", "127.0.0.1:{port}"))


#: what a fragment uses, as the block before it makes it (an open model, messages, a tool)
FRAGMENT_SETUP = """
from mnn_engine import Llm
llm = Llm("~/models/Qwen3-0.6B-MNN", thread_num=1).load()
messages = [{"role": "user", "content": "Name three rivers."}]
tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {}}}}]
"""


@pytest.mark.parametrize("index", range(len(_blocks())))
def test_each_readme_python_example_runs(home, index):
    blocks = _blocks()
    code = blocks[index]
    if "import " not in code:  # a fragment of the one before: what it names is set up as that block has it
        code = FRAGMENT_SETUP + code
    code = _as_here(code)
    if "{port}" in code:  # a client of `serve`: a server of the store (holding the test model as qwen3-0-6b)
        server = ("from mnn_engine import ModelPool as _Pool\n"
                  "_url = _Pool(defaults={'threads': 1}).start_server(port=0)\n")
        code = server + code.replace('"http://127.0.0.1:{port}/v1"', '_url + "/v1"').replace(
            '"http://127.0.0.1:{port}"', "_url")  # Anthropic's SDK: the base URL without /v1
    done = _run(code, home)
    assert done.returncode == 0, f"README block {index}:\n{code}\n{done.stderr[-3000:]}"
