"""The other dialects, each with its real client or parser: OpenAI's legacy
completions (the openai SDK), llama-server's tokenizer routes, Prometheus
metrics (prometheus_client's parser) and Ollama's API (the ollama client and
raw NDJSON)."""

from __future__ import annotations

import json

import ollama
import pytest
from fake_hub import FakeHub, repo_from_dir
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from live_server import KEY, Live
from prometheus_client.parser import text_string_to_metric_families
from support import SCRIPTED_TEXT, test_model_dir

CHAT = [{"role": "user", "content": "Who are you?"}]
WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Weather in a city",
                                            "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                           "required": ["city"]}}}


def _live(tmp_path_factory, model: str, **options):
    live = Live(tmp_path_factory.mktemp("store"), model, **options)
    yield live
    live.close()


@pytest.fixture(scope="module")
def scripted(tmp_path_factory):
    yield from _live(tmp_path_factory, "tiny-scripted", api_key=KEY)


@pytest.fixture(scope="module")
def toolcall(tmp_path_factory):
    yield from _live(tmp_path_factory, "tiny-toolcall")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    yield from _live(tmp_path_factory, "tiny")


def _post(live: Live, path: str, body, key: str | None = KEY):
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    status, hdrs, raw = live.request("POST", path, json.dumps(body), headers)
    return status, hdrs, raw


def _ollama(live: Live, key: str | None = None) -> ollama.Client:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return ollama.Client(host=live.url, headers=headers, timeout=60)


# ---------------------------------------------------------------- /v1/completions
def test_legacy_completions_with_the_sdk(scripted):
    client = scripted.client
    whole = client.completions.create(model="any", prompt="Hello", max_tokens=12, temperature=0)
    choice = whole.choices[0]
    assert whole.object == "text_completion" and whole.id.startswith("cmpl-")
    assert choice.text and choice.finish_reason in ("stop", "length") and whole.usage.completion_tokens <= 12
    streamed = client.completions.create(model="any", prompt="Hello", max_tokens=12, temperature=0, stream=True)
    assert "".join(c.choices[0].text for c in streamed if c.choices) == choice.text
    ids = scripted.engine.llm.tokenize("Hello")
    by_ids = client.completions.create(model="any", prompt=ids, max_tokens=12, temperature=0)
    assert by_ids.choices[0].text == choice.text
    echoed = client.completions.create(model="any", prompt="Hello", max_tokens=12, temperature=0, echo=True)
    assert echoed.choices[0].text == "Hello" + choice.text


def test_legacy_logprobs_shape(scripted):
    result = scripted.client.completions.create(model="any", prompt="Hello", max_tokens=6, temperature=0, logprobs=3)
    logprobs = result.choices[0].logprobs
    assert len(logprobs.tokens) == len(logprobs.token_logprobs) == len(logprobs.top_logprobs) == 6
    assert all(len(top) <= 3 for top in logprobs.top_logprobs) and all(lp <= 0 for lp in logprobs.token_logprobs)
    assert logprobs.text_offset == sorted(logprobs.text_offset)
    assert "".join(logprobs.tokens) == result.choices[0].text


@pytest.mark.parametrize(("body", "param"), [
    ({"prompt": "x", "suffix": "y"}, "suffix"), ({"prompt": "x", "logprobs": 6}, "logprobs"),
    ({"prompt": "x", "n": 2}, "n"), ({"prompt": ""}, "prompt"), ({"prompt": [[]]}, "prompt"),
    ({"prompt": [1, -2]}, "prompt"),  # prompt lists and echo with logprobs: tests/server/test_evaluation_api.py
])
def test_legacy_completions_refusals_name_the_field(scripted, body, param):
    status, _, raw = _post(scripted, "/v1/completions", body)
    assert status == 400 and json.loads(raw)["error"]["param"] == param


# ---------------------------------------------------------------- tokenizer routes
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.text(min_size=1, max_size=200))
def test_tokenize_detokenize_round_trip(scripted, text):
    status, _, raw = _post(scripted, "/tokenize", {"content": text})
    assert status == 200
    tokens = json.loads(raw)["tokens"]
    assert tokens == scripted.engine.llm.tokenize(text)
    status, _, raw = _post(scripted, "/detokenize", {"tokens": tokens})
    assert status == 200 and json.loads(raw)["content"] == scripted.engine.llm.detokenize(tokens)


def test_tokenize_with_pieces_and_apply_template(scripted):
    _, _, raw = _post(scripted, "/tokenize", {"content": "Hello 你好 🪿", "with_pieces": True})
    pieces = json.loads(raw)["tokens"]
    assert all(set(p) == {"id", "piece"} for p in pieces)
    text = b"".join(p["piece"].encode() if isinstance(p["piece"], str) else bytes(p["piece"]) for p in pieces)
    assert text.decode() == "Hello 你好 🪿"
    _, _, raw = _post(scripted, "/apply-template", {"messages": CHAT})
    assert json.loads(raw)["prompt"] == scripted.engine.llm.apply_chat_template(CHAT)
    assert _post(scripted, "/tokenize", {"content": 5})[0] == 400
    assert _post(scripted, "/tokenize", {"content": "x"}, key=None)[0] == 401  # same auth as /v1


# ---------------------------------------------------------------- /metrics
def _metrics(live: Live) -> dict:
    status, hdrs, raw = live.request("GET", "/metrics", headers={"Authorization": f"Bearer {KEY}"})
    assert status == 200 and hdrs["content-type"].startswith("text/plain")
    samples = {}
    for family in text_string_to_metric_families(raw.decode()):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def test_metrics_count_what_happened(scripted):
    before = _metrics(scripted)
    scripted.client.chat.completions.create(model="any", messages=CHAT, temperature=0)
    after = _metrics(scripted)

    def delta(name, **labels):
        key = (name, tuple(sorted(labels.items())))
        return after.get(key, 0) - before.get(key, 0)

    assert delta("mnn_engine_generations_total", finish_reason="stop") == 1
    assert delta("mnn_engine_tokens_total", kind="generated") == 17
    assert delta("mnn_engine_tokens_total", kind="prompt") > 0
    assert delta("mnn_engine_http_requests_total", route="/v1/chat/completions", status="200") == 1
    assert delta("mnn_engine_time_to_first_token_seconds_count") == 1
    assert delta("mnn_engine_decode_tokens_per_second_count") == 1
    assert after[("mnn_engine_resident_memory_bytes", ())] > 10 << 20
    assert after[("mnn_engine_model_load_seconds", ())] > 0
    assert ("mnn_engine_queue_depth", ()) in after and ("mnn_engine_busy_rejections_total", ()) in after
    scripted.request("GET", "/no/such/route", headers={"Authorization": f"Bearer {KEY}"})
    assert _metrics(scripted)[("mnn_engine_http_requests_total", (("route", "other"), ("status", "404")))] >= 1


# ---------------------------------------------------------------- Ollama
def test_ollama_client_chat_generate_and_models(scripted):
    client = _ollama(scripted, KEY)
    response = client.chat(model="tiny-scripted", messages=CHAT, options={"temperature": 0})
    assert response.message.content == SCRIPTED_TEXT and response.done and response.done_reason == "stop"
    assert response.eval_count == 17 and response.prompt_eval_count > 0 and response.total_duration > 0
    streamed = list(client.chat(model="tiny-scripted", messages=CHAT, options={"temperature": 0}, stream=True))
    assert "".join(c.message.content for c in streamed) == SCRIPTED_TEXT
    assert streamed[-1].done and not any(c.done for c in streamed[:-1])
    generated = client.generate(model="tiny-scripted", prompt="Who are you?", options={"temperature": 0})
    assert generated.response == SCRIPTED_TEXT
    limited = client.generate(model="tiny-scripted", prompt="Who are you?", options={"temperature": 0,
                                                                                      "num_predict": 3})
    assert limited.done_reason == "length" and limited.eval_count == 3
    assert [m.model for m in client.list().models] == ["tiny-scripted:latest"]
    assert [m.model for m in client.ps().models] == ["tiny-scripted:latest"]
    assert "completion" in client.show("tiny-scripted").capabilities
    assert client.generate(model="tiny-scripted", prompt="").done_reason == "load"


def test_ollama_raw_ndjson(scripted):
    status, hdrs, raw = _post(scripted, "/api/chat", {"model": "tiny-scripted", "messages": CHAT,
                                                      "options": {"temperature": 0}})
    assert status == 200 and hdrs["content-type"] == "application/x-ndjson"
    lines = [json.loads(line) for line in raw.decode().splitlines()]
    assert all(set(line) >= {"model", "created_at", "message", "done"} for line in lines)
    assert lines[-1]["done"] is True and lines[-1]["eval_count"] == 17
    assert "".join(line["message"]["content"] for line in lines) == SCRIPTED_TEXT


def test_ollama_errors_carry_ollamas_error_text(scripted):
    client = _ollama(scripted, KEY)
    with pytest.raises(ollama.ResponseError) as err:
        client.chat(model="tiny-scripted", messages=CHAT, options={"temperature": -1})
    assert err.value.status_code == 400 and "temperature" in err.value.error
    with pytest.raises(ollama.ResponseError) as err:
        _ollama(scripted).list()  # no key
    assert err.value.status_code == 401


def test_ollama_tools_format_and_think(toolcall, tiny):
    response = _ollama(toolcall).chat(model="tiny-toolcall", messages=CHAT, tools=[WEATHER], options={"temperature": 0})
    call = response.message.tool_calls[0].function
    assert call.name == "get_weather" and call.arguments == {"city": "Paris"}
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"],
              "additionalProperties": False}
    answer = _ollama(tiny).chat(model="tiny", messages=CHAT, format=schema, options={"temperature": 1, "seed": 3})
    assert set(json.loads(answer.message.content)) == {"ok"}


def test_ollama_pull_through_the_store(tmp_path, monkeypatch):
    with FakeHub() as hub:
        hub.hf["taobao-mnn/Qwen3-0.6B-MNN"] = repo_from_dir(test_model_dir("tiny-scripted"))
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        live = Live(tmp_path, "tiny")
        try:
            progress = list(_ollama(live).pull("qwen3:0.6b", stream=True))
            assert progress[0].status == "pulling manifest" and progress[-1].status == "success"
            assert any(p.completed for p in progress if p.total)
            assert live.engine.store.exists("qwen3-0-6b")
            with pytest.raises(ollama.ResponseError) as err:
                _ollama(live).pull("no-such-model")
            assert err.value.status_code == 404
        finally:
            live.close()


def test_a_chat_model_does_not_embed(scripted):
    status, _, raw = _post(scripted, "/v1/embeddings", {"model": "x", "input": "Hi"})
    assert status == 400 and json.loads(raw)["error"]["code"] == "wrong_model_kind"
    with pytest.raises(ollama.ResponseError) as err:
        _ollama(scripted, KEY).embed(model="tiny-scripted", input="Hi")
    assert err.value.status_code == 400 and "embedding" in err.value.error
    scripted.wait_idle()
