"""The example notebooks run in a real Jupyter kernel (nbclient), as they are."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import nbformat
from fake_hub import FakeHub, repo_from_dir
from nbclient import NotebookClient
from support import REPO, SCRIPTED_TEXT, test_model_dir


def _run(name: str, tmp_path: Path, monkeypatch) -> str:
    monkeypatch.setenv("MNN_ENGINE_HOME", str(tmp_path / "home"))
    # the kernel spec runs `python`: make it this interpreter
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    notebook = nbformat.read(REPO / "examples" / name, as_version=4)
    client = NotebookClient(notebook, timeout=180, kernel_name="python3",
                            resources={"metadata": {"path": str(tmp_path)}})
    client.execute()
    texts = []
    for cell in notebook.cells:
        for output in cell.get("outputs", []):
            data = output.get("data", {})
            texts.append(output.get("text", "") or str(data.get("text/markdown", "")) + str(data.get("text/plain", "")))
    return "".join(texts)


def test_quickstart_with_a_model_directory(tmp_path, monkeypatch):
    monkeypatch.setenv("MNN_ENGINE_EXAMPLE_MODEL", str(test_model_dir("tiny-scripted")))
    everything = _run("quickstart.ipynb", tmp_path, monkeypatch)
    assert SCRIPTED_TEXT in everything
    assert "stop 17 tokens" in everything
    assert everything.count(SCRIPTED_TEXT) >= 3  # printed, as Markdown, and by the chat widget
    assert "widget: " + SCRIPTED_TEXT in everything
    assert "The device supports" not in everything  # MNN's own prints stay out of the notebook
    assert (tmp_path / "home" / "models" / "tiny-scripted").is_dir()


def test_quickstart_pulls_the_default_model_into_an_empty_store(tmp_path, monkeypatch):
    monkeypatch.delenv("MNN_ENGINE_EXAMPLE_MODEL", raising=False)
    with FakeHub() as hub:
        hub.hf["taobao-mnn/Qwen3-0.6B-MNN"] = repo_from_dir(test_model_dir("tiny-scripted"))
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        everything = _run("quickstart.ipynb", tmp_path, monkeypatch)
    assert "qwen3-0-6b" in everything and SCRIPTED_TEXT in everything
    assert (tmp_path / "home" / "models" / "qwen3-0-6b").is_dir()


def test_bedtime_story(tmp_path, monkeypatch):
    monkeypatch.setenv("MNN_ENGINE_EXAMPLE_MODEL", str(test_model_dir("tiny")))  # sampled: a random-weight model
    everything = _run("bedtime_story.ipynb", tmp_path, monkeypatch)
    for chapter in (1, 2, 3):
        assert f"chapter {chapter}: " in everything
    assert "first word after" in everything and "chapters left out" in everything
