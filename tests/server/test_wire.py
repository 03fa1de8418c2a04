"""Wire fidelity: requests as the peers' own docs write them, and the fields
and headers real clients read (issue 26). Each test failed before its fix."""

from __future__ import annotations

import json
import logging
import re
import shlex
import subprocess

import openai
import pytest
from live_server import SHORT, Live, server_fixture
from support import REPO

CHAT = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4, "temperature": 0}
FORM = {"Content-Type": "application/x-www-form-urlencoded"}  # what `curl -d` declares


chat = server_fixture("tiny-scripted", access_log=True)
embedder = server_fixture("tiny-embedding")
random_weights = server_fixture("tiny")


# Ollama's docs/api.md writes every example as `curl http://localhost:11434/api/... -d '{...}'`,
# so the body arrives declared as a form; real Ollama (and llama-server) parse it as JSON.
@pytest.mark.parametrize(("path", "body"), [
    ("/api/chat", {"model": "tiny-scripted", "messages": [{"role": "user", "content": "Hi"}], "stream": False,
                   "options": {"num_predict": 4}}),
    ("/api/generate", {"model": "tiny-scripted", "prompt": "Hi", "stream": False, "options": {"num_predict": 4}}),
    ("/api/show", {"model": "tiny-scripted"}),
    ("/v1/chat/completions", CHAT),
    ("/v1/completions", {"prompt": "The sky is", "max_tokens": 4}),
    ("/tokenize", {"content": "Hello world"}),
    ("/detokenize", {"tokens": [9707, 1879]}),
    ("/apply-template", {"messages": [{"role": "user", "content": "Hi"}]}),
])
def test_json_declared_as_a_form_or_not_at_all_is_read_as_json(chat, path, body):
    for headers in (FORM, {"Content-Type": "text/plain"}, {"Content-Type": ""}):
        status, _, raw = chat.request("POST", path, json.dumps(body), headers)
        assert status == 200, (headers, raw)


@pytest.mark.parametrize("path", ["/api/embed", "/api/embeddings", "/v1/embeddings"])
def test_embedding_routes_read_a_form_declared_json_body(embedder, path):
    body = {"model": "tiny-embedding", "input": "The cat sat.", "prompt": "The cat sat."}
    assert embedder.request("POST", path, json.dumps(body), FORM)[0] == 200


def test_a_real_form_and_multipart_are_refused_by_name(chat):
    status, _, raw = chat.request("POST", "/api/chat", "model=tiny&prompt=hi", FORM)
    assert status == 400 and "form" in json.loads(raw)["error"]  # Ollama's shape: the message as a string
    status, _, raw = chat.request("POST", "/v1/chat/completions", "model=tiny&prompt=hi", FORM)
    assert status == 400 and "form" in json.loads(raw)["error"]["message"]
    status, _, raw = chat.request("POST", "/api/chat", json.dumps(CHAT), {"Content-Type": "multipart/form-data; b=x"})
    assert status == 415


def test_a_cross_origin_form_post_is_still_refused(chat):
    headers = {**FORM, "Origin": "http://evil.example"}
    assert chat.request("POST", "/v1/chat/completions", json.dumps(CHAT), headers)[0] == 403


def test_models_retrieve_gives_the_model_object_and_404_in_openais_shape(chat):
    model = chat.client.models.retrieve("tiny-scripted")
    assert model.id == "tiny-scripted" and model.object == "model" and model.owned_by == "mnn-engine"
    with pytest.raises(openai.NotFoundError) as err:
        chat.client.models.retrieve("gpt-5")
    assert err.value.status_code == 404 and err.value.code == "model_not_found"
    assert err.value.body["param"] == "model" and "gpt-5" in err.value.body["message"]


def test_refusal_is_in_the_message_and_in_the_logprobs(chat):
    status, _, reply = chat.post_json({**CHAT, "logprobs": True, "top_logprobs": 1})
    choice = reply["choices"][0]
    assert status == 200 and "refusal" in choice["message"] and choice["message"]["refusal"] is None
    assert choice["logprobs"]["refusal"] is None and choice["logprobs"]["content"]


def test_every_answer_has_a_request_id_errors_and_the_access_log_too(chat, caplog):
    with caplog.at_level(logging.INFO, logger="tornado.access"):
        raw = chat.client.chat.completions.with_raw_response.create(model="tiny-scripted", **CHAT)
        assert re.fullmatch(r"req_[0-9a-f]{24}", raw.request_id or "")
        with pytest.raises(openai.BadRequestError) as err:
            chat.client.chat.completions.create(model="tiny-scripted", messages=[], max_tokens=2)
        failed = err.value.response.headers["x-request-id"]
        assert failed.startswith("req_") and failed != raw.request_id
        status, headers, _ = chat.request("GET", "/nowhere", headers={"X-Request-Id": "trace-42"})
        assert status == 404 and headers["x-request-id"] == "trace-42"  # the client's own, echoed
        status, headers, _ = chat.request("GET", "/health", headers={"X-Request-Id": "bad id; with spaces"})
        assert status == 200 and headers["x-request-id"].startswith("req_")
        # a request too malformed for Tornado (a control character in a header) gets one too
        import socket
        with socket.create_connection((chat.host, chat.port), timeout=10) as sock:
            sock.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Bad: a\x7fb\x00\r\n\r\n")
            answer = sock.recv(65536)
        assert answer.startswith(b"HTTP/1.1 400") and b"\r\nX-Request-Id: req_" in answer
    lines = [r.getMessage() for r in caplog.records if r.name == "tornado.access"]
    assert any(f"id={failed}" in line and line.startswith("400 POST /v1/chat/completions") for line in lines)
    assert any("id=trace-42" in line and line.startswith("404 GET /nowhere") for line in lines)


def test_token_arrays_outside_the_vocabulary_name_the_likely_cause(embedder):
    status, _, raw = embedder.request("POST", "/v1/embeddings", json.dumps({"input": [[100, 10**7]]}))
    error = json.loads(raw)["error"]
    assert status == 400 and error["param"] == "input"
    assert "check_embedding_ctx_length=False" in error["message"] and "tiktoken" in error["message"]


# ---------------------------------------------------------------- the README's curl lines
def _readme_curl_lines() -> list[str]:
    text = (REPO / "README.md").read_text()
    return [line.strip() for block in re.findall(r"```bash\n(.*?)```", text, re.S)
            for line in block.splitlines() if line.strip().startswith("curl ") and "localhost:8081" in line]


#: README lines that cannot run here, and why (everything else runs as written)
NOT_HERE = {"/api/pull": "downloads a model from a hub: no network here (tests/store covers pulls)",
            "_tone": "names an adapter: tests/server/test_adapters_served.py runs it on a store that holds one"}
EMBEDDING_ROUTES = ("/v1/embeddings", "/api/embed", "/api/embeddings")


def test_the_readme_has_curl_lines_to_run():
    assert len(_readme_curl_lines()) >= 14


@pytest.mark.parametrize("line", _readme_curl_lines())
def test_every_readme_curl_line_runs_as_written(chat, embedder, line):
    if any(route in line for route in NOT_HERE):
        pytest.skip(NOT_HERE[next(r for r in NOT_HERE if r in line)])
    live = embedder if any(f"8081{route} " in line or f"8081{route}'" in line for route in EMBEDDING_ROUTES) \
        else chat
    model = live.engine.active_model_id or ("tiny-embedding" if live is embedder else "tiny-scripted")
    # The README's model names are a real phone's; here the test model answers them.
    argv = [arg.replace("localhost:8081", f"127.0.0.1:{live.port}")
            .replace("qwen3-embedding", model).replace("qwen3-0-6b", model) for arg in shlex.split(line)]
    done = subprocess.run([*argv, "-o", "/dev/stdout", "-w", "\n%{http_code}", "--max-time", "60"],
                          capture_output=True, text=True, timeout=90)
    body, _, status = done.stdout.rpartition("\n")
    assert done.returncode == 0 and status == "200", (line, status, body[:500])


# ---------------------------------------------------------------- log hygiene (the conftest fails on a traceback)
def test_closing_events_or_stopping_the_server_with_events_open_logs_no_traceback(tmp_path):
    import http.client

    for run in range(6):
        live = Live(tmp_path / str(run), "tiny-scripted")
        try:
            followers = []
            for _ in range(2):
                conn = http.client.HTTPConnection(live.host, live.port, timeout=30)
                conn.request("GET", "/events")
                response = conn.getresponse()
                assert response.status == 200
                response.read1(1)  # the first event arrived: the stream is open
                followers.append(conn)
            followers[0].close()  # a page closed
            assert live.post_json(CHAT)[0] == 200
            live.engine.stop_server()  # the other is still open
            followers[1].close()
        finally:
            live.close()


def test_a_401_on_every_generating_route_logs_no_traceback(tmp_path):
    live = Live(tmp_path, "tiny-scripted", api_key="k")
    try:
        for path in ("/v1/chat/completions", "/v1/completions", "/api/chat", "/api/generate", "/v1/embeddings"):
            assert live.request("POST", path, json.dumps(SHORT))[0] == 401
    finally:
        live.close()


# ---------------------------------------------------------------- a tool call cut off by max_tokens
PERSON = {"type": "function", "function": {"name": "Person", "parameters": {
    "type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
    "required": ["name", "age"]}}}


@pytest.mark.parametrize("stream", [False, True])
def test_a_tool_call_cut_by_max_tokens_is_a_partial_call_never_markup(random_weights, stream):
    request = {"model": "tiny", "messages": [{"role": "user", "content": "Al is 3"}], "tools": [PERSON],
               "tool_choice": "required", "max_tokens": 12, "temperature": 0}
    if not stream:
        reply = random_weights.client.chat.completions.create(**request)
        choice = reply.choices[0]
        assert choice.finish_reason == "length" and not choice.message.content
        [call] = choice.message.tool_calls
        assert call.function.name == "Person" and call.function.arguments and call.id.startswith("call_")
        return
    chunks = list(random_weights.client.chat.completions.create(**request, stream=True))
    content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    calls = [t for c in chunks if c.choices for t in (c.choices[0].delta.tool_calls or [])]
    assert "<tool_call>" not in content and calls and calls[0].function.name == "Person"
    assert chunks[-1].choices[0].finish_reason == "length"


def test_ollama_answers_404_for_a_model_it_does_not_serve_and_400_without_one(chat):
    # Ollama: 404 {"error": "model \"x\" not found, try pulling it first"}; 400 "model is required"
    for path, body in (("/api/chat", {"messages": [{"role": "user", "content": "Hi"}]}), ("/api/generate",
                       {"prompt": "Hi"}), ("/api/show", {})):
        status, _, raw = chat.request("POST", path, json.dumps({**body, "model": "llama3.2"}))
        assert status == 404 and json.loads(raw)["error"] == 'model "llama3.2" not found, try pulling it first'
        status, _, raw = chat.request("POST", path, json.dumps(body))
        assert status == 400 and json.loads(raw)["error"] == "model is required"
    for name in ("tiny-scripted", "tiny-scripted:latest", "TINY_scripted"):  # its name, as Ollama writes names
        assert chat.request("POST", "/api/show", json.dumps({"model": name}))[0] == 200


def test_ollama_show_names_fields_as_ollama_does(chat, tmp_path):
    # docs/api.md and api/types.go: model_info's key is "<architecture>.context_length", families a list
    import ollama

    client = ollama.Client(host=f"http://127.0.0.1:{chat.port}")
    shown = client.show("tiny-scripted")
    architecture = shown.modelinfo["general.architecture"]
    assert architecture and shown.modelinfo[f"{architecture}.context_length"] == chat.engine.llm.context_length
    assert shown.details.families == [shown.details.family]
    assert shown.details.quantization_level.startswith("Q")  # the test models are exported with quant_bit
    count = shown.modelinfo["general.parameter_count"]
    assert count > 10**6 and shown.details.parameter_size.endswith("M")  # read from the graph's weights
    [entry] = client.list().models
    assert entry.size > 0  # served from a directory: its files


# ---------------------------------------------------------------- tool calls streamed as they are generated
WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
toolcall = server_fixture("tiny-toolcall")  # a model that answers with a get_weather call


def test_a_streamed_tool_call_arrives_name_first_then_argument_pieces(toolcall):
    request = {"model": "any", "messages": [{"role": "user", "content": "Weather in Paris?"}], "tools": [WEATHER],
               "temperature": 0, "max_tokens": 300}
    whole = toolcall.client.chat.completions.create(**request).choices[0].message.tool_calls[0]
    pieces = [t for c in toolcall.client.chat.completions.create(**request, stream=True) if c.choices
              for t in (c.choices[0].delta.tool_calls or [])]
    first, rest = pieces[0], pieces[1:]
    assert first.id.startswith("call_") and first.function.name == "get_weather" and first.index == 0
    assert len(rest) >= 3 and all(p.id is None and p.function.name is None for p in rest)  # progress, piece by piece
    assert "".join(p.function.arguments for p in rest) == whole.function.arguments
    assert json.loads(whole.function.arguments) == {"city": "Paris"}


def test_ollama_tool_calls_carry_an_id_and_their_index(toolcall):
    import ollama

    client = ollama.Client(host=f"http://127.0.0.1:{toolcall.port}")
    reply = client.chat(model="tiny-toolcall", messages=[{"role": "user", "content": "Weather in Paris?"}],
                        tools=[WEATHER], options={"temperature": 0})
    [call] = reply.message.tool_calls
    assert call.function.name == "get_weather" and call.function.arguments == {"city": "Paris"}
    status, _, raw = toolcall.request("POST", "/api/chat", json.dumps({
        "model": "tiny-toolcall", "messages": [{"role": "user", "content": "Weather in Paris?"}], "tools": [WEATHER],
        "stream": False, "options": {"temperature": 0}}))
    wire = json.loads(raw)["message"]["tool_calls"][0]
    assert status == 200 and wire["id"].startswith("call_") and wire["function"]["index"] == 0


def test_ollama_generate_returns_its_context_and_continues_from_one(chat):
    # docs/api.md: the final object's context is "an encoding of the conversation used in this response";
    # sent back as "context", the next generation continues it
    body = {"model": "tiny-scripted", "prompt": "Hi", "stream": False, "options": {"temperature": 0, "num_predict": 6}}
    status, _, raw = chat.request("POST", "/api/generate", json.dumps(body))
    first = json.loads(raw)
    context = first["context"]
    assert status == 200 and context and all(isinstance(t, int) for t in context)
    assert len(context) == first["prompt_eval_count"] + first["eval_count"]  # the prompt's ids, then the answer's
    again = json.loads(chat.request("POST", "/api/generate", json.dumps({**body, "context": context}))[2])
    assert again["prompt_eval_count"] > len(context)  # the earlier exchange, then the new prompt
    assert again["context"][:len(context)] == context
    lines = [json.loads(line) for line in chat.request("POST", "/api/generate", json.dumps(
        {**body, "stream": True, "context": context}))[2].splitlines()]
    assert lines[-1]["done"] and lines[-1]["context"][:len(context)] == context
    status, _, raw = chat.request("POST", "/api/generate", json.dumps({**body, "context": [10**9]}))
    assert status == 400 and json.loads(raw)["code"] == "invalid_argument"
    status, _, raw = chat.request("POST", "/api/generate", json.dumps({**body, "context": "abc"}))
    assert status == 400


@pytest.mark.parametrize(("think", "status"), [("low", 200), ("medium", 200), ("high", 200), (True, 200),
                                               ("extreme", 400), (3, 400)])
def test_ollama_think_levels_are_thinking_on(chat, think, status):
    body = {"model": "tiny-scripted", "messages": [{"role": "user", "content": "Hi"}], "think": think,
            "stream": False, "options": {"num_predict": 2}}
    got, _, raw = chat.request("POST", "/api/chat", json.dumps(body))
    assert got == status, raw
    if status == 200:
        from mnn_engine.api.ollama import chat_request
        from mnn_engine.api.openai_chat import MediaPolicy

        assert chat_request(body, body["messages"], MediaPolicy()).enable_thinking is True
    if status == 400:
        assert json.loads(raw)["code"] == "invalid_argument" and "think" in json.loads(raw)["error"]


# ---------------------------------------------------------------- Ollama's own docs/api.md examples
OLLAMA_DOCS = json.loads((REPO / "tests" / "schemas" / "ollama_api_examples.json").read_text())
#: examples this server refuses on purpose: their documented status and the reason it gives
OLLAMA_REFUSED = {
    "(with suffix)": "suffix",  # fill-in-the-middle needs a FIM template: 400 "'suffix' is not supported"
    '"images"': "text-only",  # the test models have no vision encoder (issue 31): 400 "this model is text-only"
}
#: an example that cannot run here at all
OLLAMA_NOT_HERE = {"/api/pull": "downloads a model from a hub: no network here (tests/store covers pulls)",
            "_tone": "names an adapter: tests/server/test_adapters_served.py runs it on a store that holds one"}


@pytest.mark.parametrize("example", OLLAMA_DOCS["examples"], ids=lambda e: f"{e['route']} {e['section']}")
def test_ollamas_documented_curl_examples_run_as_written(chat, embedder, example):
    if example["route"] in OLLAMA_NOT_HERE:
        pytest.skip(OLLAMA_NOT_HERE[example["route"]])
    refused = next((why for key, why in OLLAMA_REFUSED.items()
                    if key in example["section"] or key in example["command"]), None)
    live = embedder if example["route"] in ("/api/embed", "/api/embeddings") else chat
    name = "tiny-embedding" if live is embedder else "tiny-scripted"
    # as written, but at this server and with its model's name (the docs name llama3.2, llava, all-minilm...)
    command = example["command"].replace("http://localhost:11434", f"http://127.0.0.1:{live.port}")
    command = re.sub(r'"model": "[^"]*"', f'"model": "{name}"', command)
    # one example annotates its JSON with // lines, which no JSON parser takes (Ollama's neither)
    command = "\n".join(line for line in command.splitlines() if not line.strip().startswith("//"))
    done = subprocess.run(["bash", "-c", command + ' -s -w "\\n%{http_code}" --max-time 60'],
                          capture_output=True, text=True, timeout=90)
    body, _, status = done.stdout.rpartition("\n")
    if refused is not None:
        assert status == "400" and refused in json.loads(body)["error"], body
        return
    assert done.returncode == 0 and status == "200", (example["section"], status, body[-500:])
    last = json.loads(body.strip().splitlines()[-1])  # a stream's last object, or the answer
    missing = set(example["documented_fields"]) - set(last)
    assert not missing, (example["section"], missing, last)
