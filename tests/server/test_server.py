"""The HTTP server on loopback with the real engine, driven by real clients."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import openai
import pytest
from live_server import KEY, Live, free_port, server_fixture, sse_events
from support import SCRIPTED_TEXT, THINKING_TEXT, test_model_dir

from mnn_engine import Engine, MnnEngineError, ModelStore
from mnn_engine.server import runner

CHAT = [{"role": "user", "content": "hi"}]
scripted_server = server_fixture("tiny-scripted")
# queue=0: "429 when busy" is tested here; the default queue in test_queue.py
tiny_server = server_fixture("tiny", queue=0)
toolcall_server = server_fixture("tiny-toolcall")
thinking_server = server_fixture("tiny-thinking")
auth_server = server_fixture("tiny-scripted", api_key=KEY, max_body_bytes=64 * 1024)



# ---------------------------------------------------------------- the openai SDK
def test_sdk_non_streaming(scripted_server):
    response = scripted_server.client.chat.completions.create(model="any", messages=CHAT, temperature=0)
    choice = response.choices[0]
    assert choice.message.role == "assistant" and choice.message.content == SCRIPTED_TEXT
    assert choice.finish_reason == "stop"
    assert response.model == "tiny-scripted" and response.object == "chat.completion"
    assert response.id.startswith("chatcmpl-") and response.system_fingerprint
    assert response.usage.completion_tokens == 17
    assert response.usage.total_tokens == response.usage.prompt_tokens + 17


def test_sdk_streaming_with_usage(scripted_server):
    stream = scripted_server.client.chat.completions.create(
        model="any", messages=CHAT, temperature=0, stream=True, stream_options={"include_usage": True})
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == SCRIPTED_TEXT
    finish = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finish == ["stop"]
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 17
    assert len({(c.id, c.created, c.model, c.system_fingerprint) for c in chunks}) == 1


def test_sdk_models(scripted_server):
    models = scripted_server.client.models.list()
    assert [m.id for m in models.data] == ["tiny-scripted"]


def test_sdk_max_tokens_aliases_and_length(scripted_server):
    client = scripted_server.client
    a = client.chat.completions.create(model="m", messages=CHAT, temperature=0, max_tokens=3)
    b = client.chat.completions.create(model="m", messages=CHAT, temperature=0, max_completion_tokens=3)
    c = client.chat.completions.create(model="m", messages=CHAT, temperature=0, extra_body={"n_predict": 3})
    for response in (a, b, c):
        assert response.choices[0].finish_reason == "length" and response.usage.completion_tokens == 3
    unlimited = client.chat.completions.create(model="m", messages=CHAT, temperature=0, max_tokens=-1)
    assert unlimited.choices[0].message.content == SCRIPTED_TEXT


def test_sdk_stop_strings(scripted_server):
    response = scripted_server.client.chat.completions.create(model="m", messages=CHAT, temperature=0,
                                                              stop=["你"])
    assert response.choices[0].message.content == "Hello! I am a tiny MNN test model, "


def test_sdk_seed_reproducibility(tiny_server):
    def sample(seed):
        return tiny_server.client.chat.completions.create(
            model="m", messages=CHAT, temperature=1.2, top_p=1.0, seed=seed, max_tokens=12,
            extra_body={"top_k": 0, "min_p": 0.0}).choices[0].message.content

    assert sample(7) == sample(7)
    assert sample(7) != sample(8)


def test_sdk_logprobs(tiny_server):
    response = tiny_server.client.chat.completions.create(model="m", messages=CHAT, temperature=0, max_tokens=4,
                                                          logprobs=True, top_logprobs=2)
    content = response.choices[0].logprobs.content
    assert len(content) == 4
    for entry in content:
        assert entry.logprob <= 0 and len(entry.top_logprobs) == 2
        assert entry.top_logprobs[0].token == entry.token
        assert bytes(entry.bytes).decode("utf-8", "replace") == entry.token


def test_sdk_logit_bias(scripted_server):
    hello = 9707  # the scripted answer's first token
    response = scripted_server.client.chat.completions.create(model="m", messages=CHAT, temperature=0, max_tokens=3,
                                                              logit_bias={str(hello): -100})
    assert not response.choices[0].message.content.startswith("Hello")


# ---------------------------------------------------------------- tools and reasoning
WEATHER = [{"type": "function", "function": {"name": "get_weather", "description": "weather in a city",
                                              "parameters": {"type": "object",
                                                             "properties": {"city": {"type": "string"}}}}}]


def test_tool_calls(toolcall_server):
    response = toolcall_server.client.chat.completions.create(model="m", messages=CHAT, tools=WEATHER, temperature=0)
    choice = response.choices[0]
    assert choice.finish_reason == "tool_calls"
    [call] = choice.message.tool_calls
    assert call.id.startswith("call_") and call.type == "function"
    assert call.function.name == "get_weather" and json.loads(call.function.arguments) == {"city": "Paris"}
    assert not choice.message.content

    follow_up = [*CHAT, choice.message.model_dump(exclude_none=True),
                 {"role": "tool", "tool_call_id": call.id, "content": '{"temperature": 21}'}]
    again = toolcall_server.client.chat.completions.create(model="m", messages=follow_up, tools=WEATHER,
                                                           temperature=0)
    assert again.choices[0].finish_reason == "tool_calls"  # the scripted model always calls


def test_tool_calls_streamed(toolcall_server):
    chunks = list(toolcall_server.client.chat.completions.create(model="m", messages=CHAT, tools=WEATHER,
                                                                 temperature=0, stream=True))
    calls = [tc for c in chunks if c.choices for tc in (c.choices[0].delta.tool_calls or [])]
    # OpenAI's shape: the first piece names the call, the rest carry its arguments
    assert calls[0].index == 0 and calls[0].function.name == "get_weather" and calls[0].id.startswith("call_")
    assert all(c.index == 0 and c.function.name is None for c in calls[1:])
    json.loads("".join(c.function.arguments or "" for c in calls))
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["tool_calls"]


def test_without_tools_the_call_is_plain_text(toolcall_server):
    response = toolcall_server.client.chat.completions.create(model="m", messages=CHAT, temperature=0)
    assert response.choices[0].message.content.startswith("<tool_call>")
    assert response.choices[0].finish_reason == "stop"


def test_reasoning_content(thinking_server):
    response = thinking_server.client.chat.completions.create(model="m", messages=CHAT, temperature=0)
    message = response.choices[0].message
    assert message.content == "Hello there!"
    assert message.model_extra["reasoning_content"] == "The user greets me."
    assert THINKING_TEXT.endswith(message.content)


def test_reasoning_streamed_separately(thinking_server):
    status, _, raw = thinking_server.request("POST", "/v1/chat/completions", json.dumps(
        {"messages": CHAT, "temperature": 0, "stream": True}))
    assert status == 200
    deltas = [e["choices"][0]["delta"] for e in sse_events(raw) if e != "[DONE]" and e["choices"]]
    reasoning = "".join(d.get("reasoning_content", "") for d in deltas)
    content = "".join(d.get("content") or "" for d in deltas)
    assert reasoning == "The user greets me." and content == "Hello there!"
    assert not any("reasoning_content" in d and "content" in d and d["content"] for d in deltas)


def test_thinking_can_be_switched_off(scripted_server):
    def prompt_tokens(**extra):
        return scripted_server.client.chat.completions.create(model="m", messages=CHAT, max_tokens=1,
                                                              **extra).usage.prompt_tokens

    plain = prompt_tokens()
    assert prompt_tokens(extra_body={"chat_template_kwargs": {"enable_thinking": False}}) > plain
    assert prompt_tokens(reasoning_effort="none") > plain  # the template writes an empty think block


# ---------------------------------------------------------------- bad input
@pytest.mark.parametrize(("body", "headers", "status", "code"), [
    ("{not json", None, 400, "invalid_argument"),
    ("[]", None, 400, "invalid_argument"),
    ('{"messages": []}', None, 400, "invalid_argument"),
    ('{"model": "m"}', None, 400, "invalid_argument"),
    ('{"messages": [{"role": "user", "content": 1}]}', None, 400, "invalid_argument"),
    ('{"messages": [{"role": "user", "content": "hi"}], "temperature": "hot"}', None, 400, "invalid_argument"),
    ('{"messages": [{"role": "user", "content": "hi"}], "temperature": -1}', None, 400, "invalid_argument"),
    ('{"messages": [{"role": "user", "content": "hi"}], "top_p": 0}', None, 400, "invalid_argument"),
    ('{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 0}', None, 400, "invalid_argument"),
    ('{"messages": [{"role": "user", "content": "hi"}], "logit_bias": {"abc": 1}}', None, 400, "invalid_argument"),
    ('{"messages": [{"role": "user", "content": "hi"}], "temperature": NaN}', None, 400, "invalid_argument"),
    (b'{"messages": [{"role": "user", "content": "\xff\xfe"}]}', None, 400, "invalid_argument"),
    ('{"messages": [{"role": "user", "content": "hi"}]}', {"Content-Type": "multipart/form-data; boundary=x"}, 415,
     "unsupported_media_type"),
    ("messages=hi&model=tiny", {"Content-Type": "application/x-www-form-urlencoded"}, 400, "invalid_argument"),
    ('{"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": '
     '"data:image/png;base64,AAAA"}}]}]}', None, 400, "invalid_argument"),
])
def test_bad_requests_get_openai_errors(scripted_server, body, headers, status, code):
    got_status, _, raw = scripted_server.request("POST", "/v1/chat/completions", body, headers)
    error = json.loads(raw)["error"]
    assert got_status == status
    assert error["code"] == code and error["type"] and error["message"]
    assert set(error) == {"message", "type", "param", "code"}
    assert "Traceback" not in raw.decode()
    ok = scripted_server.client.chat.completions.create(model="m", messages=CHAT, temperature=0)
    assert ok.choices[0].message.content == SCRIPTED_TEXT  # nothing lost


def test_unknown_fields_are_ignored(scripted_server):
    status, _, body = scripted_server.post_json({"messages": CHAT, "temperature": 0, "frobnicate": {"x": 1},
                                                 "model": "nonsense", "user": "me"})
    assert status == 200 and body["choices"][0]["message"]["content"] == SCRIPTED_TEXT


def test_huge_body_is_413(auth_server):
    big = json.dumps({"messages": [{"role": "user", "content": "x" * 100_000}]})
    status, _, raw = auth_server.request("POST", "/v1/chat/completions", big, {"Authorization": f"Bearer {KEY}"})
    assert status == 413 and json.loads(raw)["error"]["code"] == "payload_too_large"


def test_unknown_routes_and_methods(scripted_server):
    status, _, raw = scripted_server.request("GET", "/v1/nothing")
    assert status == 404 and json.loads(raw)["error"]["code"] == "not_found"
    status, _, raw = scripted_server.request("GET", "/v1/chat/completions")
    assert status == 405 and json.loads(raw)["error"]["code"] == "method_not_allowed"
    status, _, raw = scripted_server.request("DELETE", "/health")
    assert status == 405 and json.loads(raw)["error"]["code"] == "method_not_allowed"


def test_health_and_page(scripted_server):
    status, _, raw = scripted_server.request("GET", "/health")
    health = json.loads(raw)
    assert status == 200 and health["status"] == "ok" and health["model"]["state"] == "loaded"
    assert health["server"]["state"] == "running" and health["generation"]["state"] == "idle"
    # one model for every request (Engine.start_server): it is the one loaded and the default
    name = health["model"]["name"]
    assert health["models"]["switching"] is False and health["models"]["default"] == name
    assert [m["name"] for m in health["models"]["loaded"]] == [name] and health["models"]["loading"] is None
    status, headers, page = scripted_server.request("GET", "/")
    assert status == 200 and headers["content-type"].startswith("text/html")
    assert b"<script" in page and b"http://" not in page and b"https://" not in page  # nothing from a CDN


# ---------------------------------------------------------------- concurrency and cancellation
def _start_long_stream(live: Live) -> tuple[socket.socket, bytes]:
    """Open a streaming request for a long answer; return the socket once tokens flow."""
    body = json.dumps({"messages": CHAT, "stream": True, "max_tokens": 100000, "temperature": 0}).encode()
    sock = socket.create_connection((live.host, live.port), timeout=30)
    sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                 b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    received = b""
    while received.count(b"data: ") < 5:
        chunk = sock.recv(65536)
        assert chunk, received  # the server answered and closed instead of streaming
        received += chunk
    return sock, received


def test_busy_is_429_at_once_and_health_answers(tiny_server):
    sock, _ = _start_long_stream(tiny_server)
    try:
        started = time.monotonic()
        status, headers, raw = tiny_server.request("POST", "/v1/chat/completions", json.dumps({"messages": CHAT}))
        assert status == 429 and headers.get("retry-after") == "1"
        assert json.loads(raw)["error"]["code"] == "busy"
        status, _, raw = tiny_server.request("GET", "/health")
        assert status == 200 and json.loads(raw)["generation"]["state"] == "running"
        assert time.monotonic() - started < 5  # answered while the generation runs, not after it
    finally:
        sock.close()
    tiny_server.wait_idle()


def test_client_disconnect_cancels_the_generation(tiny_server):
    sock, _ = _start_long_stream(tiny_server)
    sock.close()
    tiny_server.wait_idle()
    assert tiny_server.engine.last_result.finish_reason == "cancelled"
    assert tiny_server.engine.snapshot()["model"]["state"] == "loaded"
    response = tiny_server.client.chat.completions.create(model="m", messages=CHAT, max_tokens=3)
    assert response.usage.completion_tokens == 3


def test_stopping_server_rejects_with_503(tiny_server):
    server = runner._servers[id(tiny_server.engine)]
    server.ctx.stopping = True
    try:
        status, _, raw = tiny_server.request("POST", "/v1/chat/completions", json.dumps({"messages": CHAT}))
        assert status == 503 and json.loads(raw)["error"]["code"] == "server_stopping"
        assert json.loads(tiny_server.request("GET", "/health")[2])["status"] == "stopping"
    finally:
        server.ctx.stopping = False


def test_stop_server_cancels_the_active_generation(tmp_path):
    live = Live(tmp_path, "tiny")
    try:
        sock, received = _start_long_stream(live)
        stopper = threading.Thread(target=live.engine.stop_server)
        stopper.start()
        sock.settimeout(30)
        while b"[DONE]" not in received:
            chunk = sock.recv(65536)
            if not chunk:
                break
            received += chunk
        stopper.join(30)
        sock.close()
        assert b'"code":"server_stopping"' in received.replace(b" ", b"")
        assert live.engine.last_result.finish_reason == "cancelled"
        assert live.engine.snapshot()["server"]["state"] == "stopped"
        assert live.engine.snapshot()["model"]["state"] == "loaded"
        with pytest.raises(OSError):
            socket.create_connection((live.host, live.port), timeout=2)
    finally:
        live.close()


# ---------------------------------------------------------------- auth
@pytest.mark.parametrize("route", ["/", "/health", "/v1/models", "/v1/chat/completions"])
@pytest.mark.parametrize(("authorization", "allowed"), [
    (None, False), (f"Bearer {KEY}x", False), ("Bearer", False), (f"Basic {KEY}", False), (KEY, False),
    (f"bearer {KEY}", True), (f"Bearer {KEY}", True),
])
def test_auth_matrix(auth_server, route, authorization, allowed):
    headers = {"Authorization": authorization} if authorization else {}
    method = "POST" if route.endswith("completions") else "GET"
    body = json.dumps({"messages": CHAT, "max_tokens": 1}) if method == "POST" else None
    status, hdrs, raw = auth_server.request(method, route, body, headers)
    if not route.startswith("/v1/") or allowed:
        assert status == 200
    else:
        assert status == 401 and json.loads(raw)["error"]["code"] == "unauthorized"
        assert hdrs.get("www-authenticate", "").startswith("Bearer")
    if route == "/health":
        assert KEY not in raw.decode()


def test_sdk_with_the_right_key(auth_server):
    response = auth_server.client.chat.completions.create(model="m", messages=CHAT, temperature=0)
    assert response.choices[0].message.content == SCRIPTED_TEXT
    wrong = openai.OpenAI(base_url=auth_server.url + "/v1", api_key="nope", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        wrong.models.list()


# ---------------------------------------------------------------- rules and lifecycle
def test_server_needs_a_model_and_a_free_port(tmp_path, scripted_server):
    engine = Engine(ModelStore(tmp_path))
    try:
        with pytest.raises(MnnEngineError) as err:
            engine.start_server(port=0)
        assert err.value.code == "model_not_loaded"
        engine.load(str(test_model_dir("tiny-scripted")), threads=1)
        with pytest.raises(MnnEngineError) as err:
            engine.start_server(port=scripted_server.port)
        assert err.value.code == "port_in_use"
        assert engine.snapshot()["server"]["state"] == "stopped"
        with pytest.raises(MnnEngineError) as err:
            engine.stop_server()
        assert err.value.code == "server_not_running"
    finally:
        engine.close()


def test_a_failure_after_the_bind_leaves_the_server_stopped_and_the_port_free(tmp_path, monkeypatch):
    from mnn_engine.server import runner

    engine = Engine(ModelStore(tmp_path))
    try:
        engine.load(str(test_model_dir("tiny-scripted")), threads=1)
        bound = {}
        real_bind = runner.bind

        def bind(host, port):
            bound["sockets"] = real_bind(host, port)
            return bound["sockets"]

        def broken_metrics(_models):
            raise RuntimeError("metrics could not start")

        monkeypatch.setattr(runner, "bind", bind)
        monkeypatch.setattr(runner, "Metrics", broken_metrics)
        with pytest.raises(RuntimeError):
            engine.start_server(port=0)
        assert engine.snapshot()["server"]["state"] == "stopped"  # not stuck at "starting"
        assert all(sock.fileno() == -1 for sock in bound["sockets"])  # the listening sockets were closed
        monkeypatch.undo()
        url = engine.start_server(port=0)  # and it starts
        assert engine.snapshot()["server"]["state"] == "running" and url.startswith("http://")
        engine.stop_server()
    finally:
        engine.close()


def test_generation_failure_unloads_and_the_server_says_so(tmp_path):
    live = Live(tmp_path, "tiny-scripted")
    try:
        live.engine.llm._inject_failure(2)
        status, _, body = live.post_json({"messages": CHAT})
        assert status == 500 and body["error"]["code"] == "generation_failed"
        status, _, body = live.post_json({"messages": CHAT})
        assert status == 503 and body["error"]["code"] == "model_not_loaded"
        assert json.loads(live.request("GET", "/health")[2])["status"] == "no_model"
        assert live.client.models.list().data == []
        live.engine.stop_server()  # recovery: stop, load, start
        live.engine.load(str(test_model_dir("tiny-scripted")), threads=1)
        url = live.engine.start_server(port=0)
        client = openai.OpenAI(base_url=url + "/v1", api_key="x", max_retries=0)
        assert client.chat.completions.create(model="m", messages=CHAT, temperature=0).choices[0].message.content
    finally:
        live.close()


def test_serve_command_runs_until_sigterm(tmp_path):
    port = free_port()
    env = dict(os.environ, MNN_ENGINE_HOME=str(tmp_path / "home"))
    proc = subprocess.Popen([sys.executable, "-m", "mnn_engine", "serve", str(test_model_dir("tiny-scripted")),
                             "--port", str(port), "--threads", "1", "--api-key", KEY],
                            env=env, stderr=subprocess.PIPE, text=True, cwd="/")
    try:
        line = ""
        deadline = time.monotonic() + 120
        while "mnn-engine: serving" not in line and time.monotonic() < deadline:
            line = proc.stderr.readline()
            assert line or proc.poll() is None, "serve exited early"
        assert f"http://127.0.0.1:{port}" in line
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key=KEY, max_retries=0)
        answer = client.chat.completions.create(model="tiny-scripted", messages=CHAT, temperature=0)
        assert answer.choices[0].message.content == SCRIPTED_TEXT
        with pytest.raises(openai.NotFoundError) as err:  # a name it does not serve (issue 30)
            client.chat.completions.create(model="m", messages=CHAT, temperature=0)
        assert err.value.code == "model_not_found"
        busy = subprocess.run([sys.executable, "-m", "mnn_engine", "serve", str(test_model_dir("tiny-scripted")),
                               "--port", str(port), "--threads", "1"], env=env, capture_output=True, text=True,
                              timeout=120, cwd="/")
        assert busy.returncode == 2 and "[port_in_use]" in busy.stderr
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
        assert "server stopped" in proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()


def test_all_interfaces_without_a_key_warns(tmp_path):
    port = free_port()
    env = dict(os.environ, MNN_ENGINE_HOME=str(tmp_path / "home"))
    proc = subprocess.Popen([sys.executable, "-m", "mnn_engine", "serve", str(test_model_dir("tiny")),
                             "--all-interfaces", "--port", str(port), "--threads", "1"],
                            env=env, stderr=subprocess.PIPE, text=True, cwd="/")
    try:
        lines = []
        while not any("mnn-engine: serving" in x for x in lines):
            lines.append(proc.stderr.readline())
            assert lines[-1] or proc.poll() is None
        assert any(x.startswith("warning: serving on 0.0.0.0 without an API key") for x in lines)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()


def test_serve_without_model_serves_the_store_and_defaults_to_the_last_loaded(tmp_path):
    home = tmp_path / "home"
    store = ModelStore(home)
    store.import_model(test_model_dir("tiny-scripted"), model_id="scripted")
    env = dict(os.environ, MNN_ENGINE_HOME=str(home))
    # --no-switch is one model for the server's life: with none named and none loaded before, nothing to serve
    none_yet = subprocess.run([sys.executable, "-m", "mnn_engine", "serve", "--no-switch", "--port",
                               str(free_port())], env=env, capture_output=True, text=True, timeout=60, cwd="/")
    assert none_yet.returncode == 2 and "[model_not_found]" in none_yet.stderr
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "mnn_engine", "serve", "--port", str(port), "--threads", "1"],
                            env=env, stderr=subprocess.PIPE, text=True, cwd="/")
    try:
        while "mnn-engine: serving" not in (line := proc.stderr.readline()):
            assert line or proc.poll() is None
        assert "serving the store (1 model)" in line
        url = f"http://127.0.0.1:{port}/v1/chat/completions"

        def ask(body: dict) -> tuple[int, dict]:
            request = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(request, timeout=60) as answer:
                    return answer.status, json.loads(answer.read())
            except urllib.error.HTTPError as exc:
                return exc.code, json.loads(exc.read())

        status, body = ask({"messages": CHAT})  # no model named, none loaded yet or before: say so
        assert status == 400 and body["error"]["param"] == "model"
        status, body = ask({"model": "scripted", "messages": CHAT, "temperature": 0})
        assert status == 200 and body["choices"][0]["message"]["content"] == SCRIPTED_TEXT
        status, body = ask({"messages": CHAT, "temperature": 0})  # now the one used last
        assert status == 200 and body["model"] == "scripted"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()


def test_stdlib_json_fallback_without_orjson():
    code = (
        "import sys; sys.modules['orjson'] = None\n"
        "from mnn_engine import jsonutil\n"
        "assert jsonutil.BACKEND == 'json'\n"
        "assert jsonutil.loads(jsonutil.dumps({'a': 'ü', 'b': [1, 2.5, None]})) == {'a': 'ü', 'b': [1, 2.5, None]}\n"
        "assert jsonutil.dumps({'a': 'ü'}) == '{\"a\":\"ü\"}'.encode()\n"
        "try:\n    jsonutil.loads('NaN')\nexcept ValueError:\n    print('ok')\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd="/")
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr


@pytest.mark.parametrize("access_log", [False, True])
def test_access_log_only_when_asked(tmp_path, caplog, access_log):
    live = Live(tmp_path, "tiny", access_log=access_log)
    try:
        with caplog.at_level("INFO", logger="tornado.access"):
            assert live.request("GET", "/health")[0] == 200
            # the server's thread logs after the answer is on its way: give it a moment
            deadline = time.monotonic() + 2
            while access_log and not any(r.name == "tornado.access" for r in caplog.records) \
                    and time.monotonic() < deadline:
                time.sleep(0.01)
        lines = [r for r in caplog.records if r.name == "tornado.access"]
        assert len(lines) == (1 if access_log else 0)
    finally:
        live.close()
