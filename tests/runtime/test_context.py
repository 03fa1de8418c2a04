"""A conversation that outgrows the context: an error by default, or its
oldest messages dropped (context_overflow="truncate"); --context-length."""

from __future__ import annotations

import json

import pytest
from live_server import Live
from support import test_model_dir

from mnn_engine import Engine, Llm, MnnEngineError, ModelStore

SYSTEM = {"role": "system", "content": "You are brief."}


def _long_chat(turns: int) -> list[dict]:
    chat = [SYSTEM]
    for i in range(turns):
        chat += [{"role": "user", "content": f"Question {i}: " + "tell me more about the sea " * 6},
                 {"role": "assistant", "content": "The sea is wide and deep. " * 6}]
    return [*chat, {"role": "user", "content": "And the mountains?"}]


@pytest.fixture(scope="module")
def small():
    with Llm(test_model_dir("tiny"), max_all_tokens=256) as llm:
        yield llm


def test_overflow_is_an_error_by_default(small):
    with pytest.raises(MnnEngineError) as err:
        small.generate(_long_chat(12), max_tokens=8)
    assert err.value.code == "context_length_exceeded"


def test_truncate_drops_the_fewest_oldest_messages(small):
    chat = _long_chat(12)
    result = small.generate(chat, max_tokens=32, temperature=0, context_overflow="truncate")
    dropped = result.dropped_messages
    assert dropped > 0 and dropped % 2 == 0  # whole turns: what is left starts with a user message
    kept = [SYSTEM, *chat[1 + dropped:]]
    assert result.prompt_tokens == len(small.prompt_ids(kept))
    assert result.prompt_tokens + 32 < small.context_length
    one_more = [SYSTEM, *chat[1 + dropped - 2:]]  # keeping one more turn would not fit with the answer
    try:
        assert len(small.prompt_ids(one_more)) + 32 >= small.context_length - 1
    except MnnEngineError as exc:
        assert exc.code == "context_length_exceeded"


def test_truncate_leaves_a_fitting_chat_alone(small):
    chat = _long_chat(1)
    result = small.generate(chat, max_tokens=8, temperature=0, context_overflow="truncate")
    assert result.dropped_messages == 0
    assert result.prompt_tokens == len(small.prompt_ids(chat))


def test_truncate_refuses_when_the_last_message_alone_is_too_long(small):
    chat = [SYSTEM, {"role": "user", "content": "sea " * 400}]
    with pytest.raises(MnnEngineError) as err:
        small.generate(chat, max_tokens=8, context_overflow="truncate")
    assert err.value.code == "context_length_exceeded"
    with pytest.raises(MnnEngineError):
        small.generate(chat, context_overflow="drop-everything")


def test_context_length_load_option(tmp_path):
    with Engine(ModelStore(tmp_path)) as engine:
        engine.load(str(test_model_dir("tiny")), context_length=300, threads=1)
        assert engine.snapshot()["model"]["context_length"] == 300
        assert engine.snapshot()["model"]["options"]["context_length"] == 300
    with pytest.raises(MnnEngineError) as err, Engine(ModelStore(tmp_path)) as engine:
        engine.load(str(test_model_dir("tiny")), context_length=3)
    assert err.value.param == "context_length"


def test_server_truncates_on_request_and_says_so(tmp_path):
    live = Live(tmp_path, "tiny")
    try:
        engine = live.engine
        engine.stop_server()
        engine.load(str(test_model_dir("tiny")), context_length=256, threads=1)
        live.url = engine.start_server(port=live.port)
        status, headers, body = live.request("GET", "/v1/models")
        assert json.loads(body)["data"][0]["context_length"] == 256
        payload = {"messages": _long_chat(12), "max_tokens": 16}
        assert live.post_json(payload)[2]["error"]["code"] == "context_length_exceeded"
        for stream in (False, True):
            status, headers, body = live.request(
                "POST", "/v1/chat/completions", json.dumps({**payload, "context_overflow": "truncate",
                                                             "stream": stream}))
            assert status == 200, body
            assert int(headers["x-context-dropped-messages"]) > 0
    finally:
        live.close()
