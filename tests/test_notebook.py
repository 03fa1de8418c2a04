"""The example notebook runs in a real Jupyter kernel (nbclient)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from support import REPO, SCRIPTED_TEXT, test_model_dir


def test_quickstart_notebook_streams_a_reply(tmp_path, monkeypatch):
    monkeypatch.setenv("MNN_ENGINE_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("MNN_ENGINE_EXAMPLE_MODEL", str(test_model_dir("tiny-scripted")))
    # the kernel spec runs `python`: make it this interpreter
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    notebook = nbformat.read(REPO / "examples" / "quickstart.ipynb", as_version=4)
    client = NotebookClient(notebook, timeout=120, kernel_name="python3",
                            resources={"metadata": {"path": str(tmp_path)}})
    client.execute()
    texts = []
    for cell in notebook.cells:
        for output in cell.get("outputs", []):
            texts.append(output.get("text", "") or str(output.get("data", {}).get("text/plain", "")))
    everything = "".join(texts)
    assert SCRIPTED_TEXT in everything
    assert "stop 17 tokens" in everything
    assert "The device supports" not in everything  # MNN's own prints stay out of the notebook
    assert (tmp_path / "home" / "models" / "tiny-scripted").is_dir()
