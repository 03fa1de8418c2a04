"""The chat widget driven as JupyterLab drives it: a real kernel, and the
front end's own messages on the wire (``comm_msg`` with ``update`` for a typed
value and ``custom`` ``{"event": "click"}`` for a button, as ipywidgets'
widget protocol 2.1.0 has them, docs/source/examples/Widget Low Level.ipynb
and ipywidgets/widgets/widget_button.py ``_handle_button_msg``). What the test
reads back is what a front end would draw: the Output and Label models' state
updates on iopub."""

from __future__ import annotations

import os
import queue
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from support import test_model_dir

jupyter_client = pytest.importorskip("jupyter_client")
pytest.importorskip("ipywidgets")

SETUP = """
from mnn_engine import Engine
from mnn_engine.notebook import chat_widget
engine = Engine()
engine.load({model!r})
chat = chat_widget(engine, max_tokens=4000, ignore_eos=True, temperature=0)
chat
"""


class Frontend:
    """Just enough of a widget front end: the models the kernel opened, their
    state as updated, and the messages a user's typing and clicks send. The
    messages are the Jupyter widget protocol's, version 2 (ipywidgets'
    packages/schema/messages.md: ``comm_open`` with the full state, ``update``
    and ``echo_update`` for state, ``custom`` with ``{"event": "click"}`` for a
    button), the ones @jupyter-widgets/controls sends from a browser."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.models: dict[str, dict[str, Any]] = {}

    def pump(self, timeout: float = 0.2) -> None:
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            try:
                msg = self.client.get_iopub_msg(timeout=left)
            except queue.Empty:
                return
            content = msg["content"]
            if msg["msg_type"] == "comm_open" and content.get("target_name") == "jupyter.widget":
                self.models[content["comm_id"]] = dict(content["data"]["state"])
            elif msg["msg_type"] == "comm_msg" and content["comm_id"] in self.models:
                if content["data"].get("method") in ("update", "echo_update"):
                    self.models[content["comm_id"]].update(content["data"]["state"])
            elif msg["msg_type"] == "error":
                raise AssertionError("\n".join(content["traceback"]))

    def until(self, condition, timeout: float = 60.0, what: str = "") -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            assert time.monotonic() < deadline, f"the widget never showed {what}: {self.models}"
            self.pump()

    def _matching(self, model_name: str, state: dict[str, Any]) -> list[str]:
        return [cid for cid, s in self.models.items() if s.get("_model_name") == model_name
                and all(s.get(k) == v for k, v in state.items())]

    def find(self, model_name: str, **state: Any) -> str:
        return self._matching(model_name, state)[0]

    def until_shown(self) -> None:
        """Wait for every part of the chat widget: the kernel opens their comms
        one by one, so seeing one button says nothing of the label or output."""
        parts = [("TextareaModel", {}), ("ButtonModel", {"description": "Send"}),
                 ("ButtonModel", {"description": "Stop"}), ("LabelModel", {}), ("OutputModel", {})]
        self.until(lambda: all(self._matching(name, state) for name, state in parts), what="all its parts")

    def _send(self, comm_id: str, data: dict[str, Any]) -> None:
        self.client.shell_channel.send(self.client.session.msg("comm_msg", {"comm_id": comm_id, "data": data}))

    def type(self, comm_id: str, text: str) -> None:
        self._send(comm_id, {"method": "update", "state": {"value": text}, "buffer_paths": []})

    def click(self, comm_id: str) -> None:
        self._send(comm_id, {"method": "custom", "content": {"event": "click"}})

    def shown(self, output_id: str) -> str:
        return "".join(str(o.get("data", {}).get("text/markdown", "")) for o in self.models[output_id]["outputs"])


@pytest.fixture
def frontend(tmp_path, monkeypatch):
    monkeypatch.setenv("MNN_ENGINE_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    manager, client = jupyter_client.manager.start_new_kernel(kernel_name="python3", cwd=str(tmp_path))
    try:
        client.execute(SETUP.format(model=str(test_model_dir("tiny"))))
        ui = Frontend(client)
        ui.until_shown()
        yield ui
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)


def test_typing_send_then_stop_keeps_the_partial_answer_and_the_model(frontend):
    ui = frontend
    prompt, send = ui.find("TextareaModel"), ui.find("ButtonModel", description="Send")
    stop, status = ui.find("ButtonModel", description="Stop"), ui.find("LabelModel")
    output = ui.find("OutputModel")
    ui.type(prompt, "tell me a long story")
    ui.click(send)
    ui.until(lambda: ui.models[stop]["disabled"] is False and "**assistant:** " in ui.shown(output),
             what="an answer streaming")
    ui.click(stop)
    ui.until(lambda: ui.models[stop]["disabled"] is True, timeout=20, what="Stop ending the answer")
    assert "(stopped)" in ui.models[status]["value"], ui.models[status]["value"]
    tokens = int(ui.models[status]["value"].split()[0])
    assert 0 < tokens < 4000  # stopped, not run on to max_tokens
    assert "*(stopped)*" in ui.shown(output) and "**user:** tell me a long story" in ui.shown(output)
    # the model stays loaded: the next question is answered (and stopped again)
    ui.type(prompt, "and another")
    ui.click(send)
    ui.until(lambda: "**user:** and another" in ui.shown(output), what="the second question")
    ui.click(stop)
    ui.until(lambda: ui.models[stop]["disabled"] is True and "error" not in ui.models[status]["value"],
             timeout=20, what="the second answer stopped")
    assert ui.shown(output).count("*(stopped)*") == 1  # only the last answer carries the note


def test_stop_then_send_at_once_is_not_busy(frontend):
    """Stop and an immediate Send (faster than the cancelled generation can
    wind down): the new question waits for it, instead of failing busy."""
    ui = frontend
    prompt, send = ui.find("TextareaModel"), ui.find("ButtonModel", description="Send")
    stop, status, output = ui.find("ButtonModel", description="Stop"), ui.find("LabelModel"), ui.find("OutputModel")
    ui.type(prompt, "first")
    ui.click(send)
    ui.until(lambda: "**assistant:** " in ui.shown(output), what="the first answer streaming")
    ui.click(stop)
    ui.type(prompt, "second")
    ui.click(send)
    ui.until(lambda: "**user:** second" in ui.shown(output), what="the second question taken")
    ui.click(stop)
    ui.until(lambda: ui.models[stop]["disabled"] is True and "**user:** second" in ui.shown(output),
             timeout=20, what="the second answer")
    assert "busy" not in ui.models[status]["value"] and "error" not in ui.models[status]["value"]


POOL_SETUP = """
from mnn_engine import ModelPool, ModelStore
from mnn_engine.notebook import chat_widget
store = ModelStore()
store.import_model({scripted!r}, model_id="scripted")
store.import_model({tiny!r}, model_id="tiny")
store.import_adapter({adapter!r}, "scripted", name="says")
pool = ModelPool(store, defaults={{"threads": 1}}, max_loaded=1, keep_alive=None)
chat = chat_widget(pool, {model!r}, temperature=0)
chat
"""


@pytest.mark.parametrize("model, loaded", [("scripted", "['scripted']"),
                                           ("scripted_says", "['scripted', 'scripted_says']")])
def test_a_widget_on_a_store_answers_with_the_model_it_names(tmp_path, monkeypatch, model, loaded):
    """The notebook helpers take a model name as the server does (a LoRA
    adapter's ``BASE_NAME`` too): the widget leases it from a ModelPool for
    each answer, loading it when it is not."""
    from support import SCRIPTED_TEXT

    says = SCRIPTED_TEXT if model == "scripted" else "Hello! I am a test model."  # tiny-scripted-lora's script

    monkeypatch.setenv("MNN_ENGINE_HOME", str(tmp_path / "home"))
    manager, client = jupyter_client.manager.start_new_kernel(kernel_name="python3", cwd=str(tmp_path))
    try:
        client.execute(POOL_SETUP.format(scripted=str(test_model_dir("tiny-scripted")),
                                         tiny=str(test_model_dir("tiny")),
                                         adapter=str(test_model_dir("tiny-scripted-lora")), model=model))
        ui = Frontend(client)
        ui.until_shown()
        prompt, send = ui.find("TextareaModel"), ui.find("ButtonModel", description="Send")
        status, output = ui.find("LabelModel"), ui.find("OutputModel")
        ui.type(prompt, "hi")
        ui.click(send)
        ui.until(lambda: "tokens," in ui.models[status]["value"], what="the answer's figures")
        assert f"**assistant:** {says}" in ui.shown(output)
        printed: list[str] = []
        reply = client.execute_interactive("print(sorted(n for n, _ in pool.loaded_engines()))", timeout=30,
                                           output_hook=lambda m: printed.append(m["content"].get("text", ""))
                                           if m["msg_type"] == "stream" else None)
        assert reply["content"]["status"] == "ok" and "".join(printed).strip() == loaded
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)
