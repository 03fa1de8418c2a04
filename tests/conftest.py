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


# ---------------------------------------------------------------- every OpenAI answer fits OpenAI's schema
# Whatever a test sends, each answer of an OpenAI route (/v1/...) is checked at the server, as it is
# written, against OpenAI's own JSON schema for it (tests/openai_schemas.py), and each of Anthropic's
# (/v1/messages, events included) against the anthropic SDK's own types (tests/anthropic_types.py); a
# test whose requests got an answer that does not fit fails (issue 26).
_schema_violations: list[str] = []


def _watch_openai_answers() -> None:
    import json

    from mnn_engine.server.app import BodyHandler, JsonHandler

    plain, event = JsonHandler.send_json_bytes, BodyHandler.send_event

    def send_json_bytes(self, body: bytes, status: int = 200) -> None:
        path = self.request.path
        if path.startswith("/v1/models") and "anthropic-version" in self.request.headers:
            path = "anthropic:" + path  # the model list in Anthropic's shape, for its SDK
        _record(path, status, json.loads(body), False)
        plain(self, body, status)

    async def send_event(self, data, name=None) -> None:
        _record(self.request.path, 200, data, True, name)
        await event(self, data, name)

    JsonHandler.send_json_bytes, BodyHandler.send_event = send_json_bytes, send_event


def _record(path: str, status: int, body, streamed: bool, event: str | None = None) -> None:
    from anthropic_types import violations
    from openai_schemas import check

    if path.startswith(("/v1/messages", "anthropic:")):  # a stream's events by their name
        _schema_violations.extend(f"{path} ({status}{', ' + event if event else ''}): {problem}"
                                  for problem in violations(path, status, body, event if streamed else None))
        return
    _schema_violations.extend(f"{path} ({status}): {problem}" for problem in check(path, status, body, streamed))


_watch_openai_answers()


@pytest.fixture(autouse=True)
def openai_answers_fit_openais_schemas():
    start = len(_schema_violations)
    yield
    new = _schema_violations[start:]
    if new:
        pytest.fail(f"{len(new)} answer(s) do not fit OpenAI's schema:\n" + "\n".join(new[:20]))
