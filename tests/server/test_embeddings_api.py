"""``/v1/embeddings`` with the openai SDK, Ollama's ``/api/embed`` and
``/api/embeddings`` with the ollama client, on a real server on loopback
serving the tiny text-embedding model."""

from __future__ import annotations

import base64
import json
import math
import struct

import ollama
import openai
import pytest
from live_server import KEY, Live
from prometheus_client.parser import text_string_to_metric_families

TEXTS = ["The cat sat on the mat.", "A dog barked at night.", "The cat sat on the mat."]
AUTH = {"Authorization": f"Bearer {KEY}"}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    live = Live(tmp_path_factory.mktemp("store"), "tiny-embedding", api_key=KEY)
    yield live
    live.close()


def _post(live: Live, path: str, body) -> tuple[int, dict]:
    status, _, raw = live.request("POST", path, json.dumps(body), AUTH)
    return status, json.loads(raw)


def _norm(vector) -> float:
    return math.sqrt(math.fsum(v * v for v in vector))


def test_openai_sdk_float_and_base64_agree_and_keep_the_batch_order(server):
    floats = server.client.embeddings.create(model="any", input=TEXTS, encoding_format="float")
    assert [d.index for d in floats.data] == [0, 1, 2]
    vectors = [d.embedding for d in floats.data]
    assert vectors[0] == vectors[2] != vectors[1]
    assert all(len(v) == 128 and _norm(v) == pytest.approx(1.0, abs=1e-5) for v in vectors)
    assert floats.usage.prompt_tokens == floats.usage.total_tokens > len(TEXTS)
    assert floats.model == "tiny-embedding"
    # the SDK asks for base64 unless told otherwise, and decodes it to floats
    default = server.client.embeddings.create(model="any", input=TEXTS)
    assert [d.embedding for d in default.data] == vectors
    status, raw = _post(server, "/v1/embeddings", {"input": TEXTS[1], "encoding_format": "base64"})
    assert status == 200 and raw["object"] == "list" and raw["data"][0]["object"] == "embedding"
    packed = base64.b64decode(raw["data"][0]["embedding"])
    assert list(struct.unpack(f"<{len(packed) // 4}f", packed)) == vectors[1]


def test_token_id_inputs_and_dimensions(server):
    ids = server.engine.llm.tokenize("Hello world<|endoftext|>")
    by_ids = server.client.embeddings.create(model="any", input=[ids, ids], encoding_format="float")
    by_text = server.client.embeddings.create(model="any", input="Hello world", encoding_format="float")
    assert by_ids.data[0].embedding == by_ids.data[1].embedding == by_text.data[0].embedding
    short = server.client.embeddings.create(model="any", input="Hello world", dimensions=32, encoding_format="float")
    vector = short.data[0].embedding
    assert len(vector) == 32 and _norm(vector) == pytest.approx(1.0, abs=1e-6)
    head = by_text.data[0].embedding[:32]
    assert vector == pytest.approx([v / _norm(head) for v in head], abs=1e-7)


@pytest.mark.parametrize(("body", "param", "code"), [
    ({}, "input", "invalid_argument"),
    ({"input": ""}, "input", "empty_prompt"),
    ({"input": []}, "input", "invalid_argument"),
    ({"input": ["a", 5]}, "input", "invalid_argument"),
    ({"input": "a", "encoding_format": "int8"}, "encoding_format", "invalid_argument"),
    ({"input": "a", "dimensions": 0}, "dimensions", "invalid_argument"),
    ({"input": "a", "dimensions": 129}, "dimensions", "invalid_argument"),
    ({"input": "word " * 5000}, "input", "context_length_exceeded"),
])
def test_refusals_name_the_field(server, body, param, code):
    status, raw = _post(server, "/v1/embeddings", body)
    assert status == 400 and raw["error"]["param"] == param and raw["error"]["code"] == code
    server.wait_idle()


def test_an_embedding_model_does_not_chat(server):
    with pytest.raises(openai.BadRequestError) as err:
        server.client.chat.completions.create(model="any", messages=[{"role": "user", "content": "Hi"}])
    assert err.value.body["code"] == "wrong_model_kind"
    status, raw = _post(server, "/v1/completions", {"prompt": "Hi"})
    assert status == 400 and raw["error"]["code"] == "wrong_model_kind"


def test_ollama_embed_and_the_older_route(server):
    client = ollama.Client(host=server.url, headers=AUTH, timeout=60)
    response = client.embed(model="tiny-embedding", input=TEXTS)
    openai_vectors = [d.embedding for d in server.client.embeddings.create(
        model="any", input=TEXTS, encoding_format="float").data]
    assert [list(v) for v in response.embeddings] == openai_vectors
    assert response.prompt_eval_count > len(TEXTS) and response.total_duration > 0
    single = client.embed(model="tiny-embedding", input=TEXTS[0], dimensions=16)
    assert len(single.embeddings) == 1 and len(single.embeddings[0]) == 16
    legacy = client.embeddings(model="tiny-embedding", prompt=TEXTS[0]).embedding
    assert _norm(legacy) != pytest.approx(1.0, abs=1e-3)  # Ollama's older route does not scale
    assert [v / _norm(legacy) for v in legacy] == pytest.approx(openai_vectors[0], abs=1e-6)
    # truncate (Ollama's default) cuts a long input; truncate false refuses it
    assert len(client.embed(model="tiny-embedding", input="word " * 5000).embeddings) == 1
    with pytest.raises(ollama.ResponseError) as err:
        client.embed(model="tiny-embedding", input="word " * 5000, truncate=False)
    assert err.value.status_code == 400
    assert client.show("tiny-embedding").capabilities == ["embedding"]


def test_health_metrics_and_the_api_description(server):
    _, _, raw = server.request("GET", "/health", headers=AUTH)
    assert json.loads(raw)["model"]["capabilities"] == ["embedding"]
    server.client.embeddings.create(model="any", input=["one", "two"])
    _, _, raw = server.request("GET", "/metrics", headers=AUTH)
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for family in text_string_to_metric_families(raw.decode()) for s in family.samples}
    assert samples[("mnn_engine_generations_total", (("finish_reason", "embedded"),))] >= 1
    assert samples[("mnn_engine_http_requests_total", (("route", "/v1/embeddings"), ("status", "200")))] >= 1
    _, _, raw = server.request("GET", "/openapi.json")
    paths = json.loads(raw)["paths"]
    assert {"/v1/embeddings", "/api/embed", "/api/embeddings"} <= set(paths)
