"""Shared fixtures: loaded engines on the generated test models."""

from __future__ import annotations

import pytest
from support import test_model_dir


def _load(name: str):
    from mnn_engine import Llm

    llm = Llm(test_model_dir(name), thread_num=2)
    llm.load()
    return llm


def _session_model(name: str):
    @pytest.fixture(scope="session")
    def loaded():
        llm = _load(name)
        yield llm
        llm.close()

    return loaded


scripted = _session_model("tiny-scripted")
tiny = _session_model("tiny")
toolcall = _session_model("tiny-toolcall")
smollm = _session_model("smollm2-135m")
thinking_model = _session_model("tiny-thinking")


@pytest.fixture
def chat():
    return [{"role": "user", "content": "Who are you?"}]
