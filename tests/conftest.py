"""Shared fixtures: loaded engines on the generated test models."""

from __future__ import annotations

import pytest
from support import test_model_dir


def _load(name: str):
    from mnn_engine import Llm

    llm = Llm(test_model_dir(name), thread_num=2)
    llm.load()
    return llm


@pytest.fixture(scope="session")
def scripted():
    llm = _load("tiny-scripted")
    yield llm
    llm.close()


@pytest.fixture(scope="session")
def tiny():
    llm = _load("tiny")
    yield llm
    llm.close()


@pytest.fixture(scope="session")
def toolcall():
    llm = _load("tiny-toolcall")
    yield llm
    llm.close()


@pytest.fixture(scope="session")
def smollm():
    llm = _load("smollm2-135m")
    yield llm
    llm.close()


@pytest.fixture
def chat():
    return [{"role": "user", "content": "Who are you?"}]
