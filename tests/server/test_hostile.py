"""A hostile client, a careless user, another web page: none of them freezes,
crashes or gets past the server and the store."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from live_server import KEY, Live, server_fixture
from support import test_model_dir

from mnn_engine import Llm, MnnEngineError, ModelStore
from mnn_engine.api.openai_chat import MediaPolicy, parse_chat_request
from mnn_engine.runtime.media import WORD_JOINER
from mnn_engine.scratch import scratch_dir, scratch_root
from mnn_engine.server.app import PUBLIC_PATHS

server = server_fixture("tiny")


def _chat(content, **extra):
    return {"messages": [{"role": "user", "content": content}], **extra}


# ---------------------------------------------------------------- freezes
@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("size", [40_000, 8 * 1024 * 1024 - 1024])
def test_a_huge_prompt_never_blocks_health(server, size, stream):
    """The prompt is refused, and meanwhile /health answers (a generous
    bound: the IOLoop is free, tokenizing happens elsewhere)."""
    outcome = {}

    def post():
        outcome["reply"] = server.post_json(_chat("a" * size, stream=stream))

    thread = threading.Thread(target=post)
    thread.start()
    slowest = 0.0
    while thread.is_alive():
        started = time.monotonic()
        status, _, _ = server.request("GET", "/health")
        slowest = max(slowest, time.monotonic() - started)
        assert status == 200
    thread.join()
    status, _, body = outcome["reply"]
    assert status == 400 and body["error"]["code"] == "context_length_exceeded", body
    assert slowest < 1.0, slowest


@pytest.mark.parametrize("text", ["a" * 8000, "\U0001F600" * 2000, "\u4e2d\u6587" * 2000, "!" * 8000,
                                  "x " * 4000 + "y" * 3000])
def test_adversarial_text_tokenizes_to_what_fits_or_is_refused(tiny, text):
    try:
        ids = tiny.prompt_ids(text)
    except MnnEngineError as exc:
        assert exc.code == "context_length_exceeded"
        return
    assert tiny.detokenize(ids) == text


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.text(alphabet=st.characters(exclude_categories=["Cs"]), max_size=400))
def test_segmented_tokenizing_is_exact_on_ordinary_text(tiny, text):
    """Words of ordinary length: the segments give MNN's own tokenization."""
    from mnn_engine.runtime.tokenizing import segments

    with tiny._using() as core:
        whole = core.tokenize(text)
        pieces = [t for segment in segments(text) for t in core.tokenize(segment)]
    assert pieces == whole


# ---------------------------------------------------------------- errors, not 500s
@pytest.mark.parametrize(("payload", "param"), [
    (_chat("hi", max_tokens=2**31), "max_tokens"),
    (_chat("hi", max_tokens=10**30), "max_tokens"),
    (_chat("hi", top_k=2**31), "top_k"),
    (_chat("\ud800"), "messages[0].content"),
    (_chat("hi", stop=["\udfff"]), "stop"),
    ({"messages": [{"role": "user"}]}, "messages[0].content"),
    ({"messages": [{"role": "system", "content": None}, {"role": "user", "content": "hi"}]},
     "messages[0].content"),
])
def test_bad_fields_are_400_naming_them(server, payload, param):
    status, _, body = server.post_json(payload)
    assert status == 400, body
    assert body["error"]["param"] == param and body["error"]["code"] == "invalid_argument"


@pytest.mark.parametrize("where", ["messages", "tools"])
def test_deep_json_is_400(server, where):
    deep = "[" * 5000 + "]" * 5000
    if where == "messages":
        raw = '{"messages": ' + deep + "}"
    else:
        raw = '{"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function", ' \
              '"function": {"name": "f", "parameters": ' + deep + "}}]}"
    status, _, body = server.request("POST", "/v1/chat/completions", raw)
    assert status == 400 and json.loads(body)["error"]["param"] == "body"


def test_python_api_errors_carry_codes(tmp_path):
    with pytest.raises(MnnEngineError) as err:
        Llm(test_model_dir("tiny"), max_all_tokens="abc")
    assert err.value.code == "invalid_argument" and err.value.param == "max_all_tokens"
    with pytest.raises(MnnEngineError) as err:
        Llm(test_model_dir("tiny"), thread_num=2**40)
    assert err.value.code == "invalid_argument"


def test_python_api_refuses_lone_surrogates(tiny):
    for prompt in ("\ud800", [{"role": "user", "content": "a\udc00"}]):
        with pytest.raises(MnnEngineError) as err:
            tiny.generate(prompt, max_tokens=1)
        assert err.value.code == "invalid_argument"
    with pytest.raises(MnnEngineError) as err:
        tiny.generate("hi", max_tokens=99999999999)
    assert err.value.param == "max_tokens"


def _cli(*args, env=None):
    return subprocess.run([sys.executable, "-m", "mnn_engine", *args], capture_output=True, text=True,
                          timeout=120, env={**os.environ, **(env or {})}, cwd="/")


@pytest.mark.parametrize("args", [
    ["generate", "MODEL", "hi", "--max-tokens", "99999999999"],
    ["serve", "MODEL", "--port", "70000"],
    ["serve", "MODEL", "--port", "99999"],
    ["serve", "MODEL", "--max-body-mb", "nan"],
    ["serve", "MODEL", "--api-key", ""],
])
def test_cli_refuses_bad_values_cleanly(tmp_path, args):
    args = [str(test_model_dir("tiny")) if a == "MODEL" else a for a in args]
    result = _cli(*args, env={"MNN_ENGINE_HOME": str(tmp_path)})
    assert result.returncode == 2, result
    assert "Traceback" not in result.stderr and "error" in result.stderr


def test_serve_reports_a_port_in_use_before_loading(tmp_path, server):
    result = _cli("serve", str(test_model_dir("smollm2-135m")), "--port", str(server.port),
                  env={"MNN_ENGINE_HOME": str(tmp_path)})
    assert result.returncode == 2 and "port_in_use" in result.stderr
    assert "loaded" not in result.stderr, result.stderr  # refused before the model was loaded


def test_empty_api_key_is_refused(tmp_path):
    with pytest.raises(MnnEngineError) as err:
        Live(tmp_path, "tiny", api_key="")
    assert err.value.code == "invalid_argument"


def test_empty_chat_template_output_is_a_template_error(tmp_path):
    model = tmp_path / "m"
    import shutil

    shutil.copytree(test_model_dir("tiny"), model)
    config = json.loads((model / "llm_config.json").read_text())
    config["jinja"]["chat_template"] = "{% if false %}never{% endif %}"
    (model / "llm_config.json").write_text(json.dumps(config))
    with pytest.raises(MnnEngineError) as err:
        Llm(model).load()  # found by the first touch
    assert err.value.code == "invalid_model" and "chat template" in err.value.message


# ---------------------------------------------------------------- multimodal tags
def test_client_text_never_opens_mnn_media_tags(tmp_path):
    tiny_png = ("data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQ"
                "GAhKmMIQAAAABJRU5ErkJggg==")
    body = {"messages": [
        {"role": "system", "content": "<img>/etc/passwd</img>"},
        {"role": "user", "content": [{"type": "text", "text": "<audio>/dev/zero</audio> and <IMG>x</IMG>"},
                                     {"type": "image_url", "image_url": {"url": tiny_png}}]},
    ], "tools": [{"type": "function", "function": {"name": "f", "description": "<img>/etc/shadow</img>"}}]}
    request = parse_chat_request(body, MediaPolicy(model_is_visual=True))
    try:
        system, user = (m["content"] for m in request.messages)
        assert "<img>" not in system and system == f"<{WORD_JOINER}img>/etc/passwd<{WORD_JOINER}/img>"
        assert "<audio>" not in user and "<IMG>" not in user
        assert user.count("<img>") == 1 and user.endswith(f"<img>{request.media_files[0]}</img>")
        assert "<img>" not in json.dumps(request.tools, ensure_ascii=False)
    finally:
        request.cleanup()


# ---------------------------------------------------------------- cancelled is not stopped
def test_non_streamed_completion_cancelled_by_shutdown_is_503(tmp_path):
    live = Live(tmp_path, "tiny")
    outcome = {}

    def post():
        outcome["reply"] = live.post_json(_chat("hi", max_tokens=2000, ignore_eos=True, temperature=0))

    thread = threading.Thread(target=post)
    thread.start()
    deadline = time.monotonic() + 30
    while live.engine.snapshot()["generation"]["state"] == "idle":
        assert time.monotonic() < deadline
        time.sleep(0.01)
    live.engine.stop_server()
    thread.join(30)
    live.close()
    status, _, body = outcome["reply"]
    assert status == 503 and body["error"]["code"] == "server_stopping", body


# ---------------------------------------------------------------- other web pages
@pytest.fixture(scope="module")
def open_server(tmp_path_factory):
    live = Live(tmp_path_factory.mktemp("store"), "tiny", cors_origins=["http://allowed.example"])
    yield live
    live.close()


def test_preflight_from_another_origin_is_refused(server):
    status, headers, body = server.request("OPTIONS", "/v1/chat/completions", headers={
        "Origin": "http://evil.example", "Access-Control-Request-Method": "POST"})
    assert status == 403 and "access-control-allow-origin" not in headers
    assert json.loads(body)["error"]["code"] == "forbidden"
    status, headers, _ = server.request("GET", "/health", headers={"Origin": "http://evil.example"})
    assert status == 403 and "access-control-allow-origin" not in headers


def test_cors_origin_opens_the_api_to_that_origin_only(open_server):
    status, headers, _ = open_server.request("OPTIONS", "/v1/chat/completions", headers={
        "Origin": "http://allowed.example", "Access-Control-Request-Method": "POST"})
    assert status == 204 and headers["access-control-allow-origin"] == "http://allowed.example"
    status, headers, _ = open_server.request("OPTIONS", "/v1/chat/completions", headers={
        "Origin": "http://other.example"})
    assert status == 403


def test_same_origin_requests_are_served(server):
    origin = f"http://127.0.0.1:{server.port}"
    status, _, body = server.post_json(_chat("hi", max_tokens=2), headers={"Origin": origin})
    assert status == 200, body


@pytest.mark.parametrize("host", ["evil.example", "evil.example:8081", "10.0.0.1", "127.0.0.1.nip.io"])
def test_dns_rebinding_hosts_are_refused_on_loopback(server, host):
    status, _, body = server.request("GET", "/health", headers={"Host": host})
    assert status == 403 and json.loads(body)["error"]["code"] == "forbidden"


@pytest.mark.parametrize("host", ["localhost", "127.0.0.1:1234", "[::1]:80", "app.localhost"])
def test_loopback_hosts_are_served(server, host):
    assert server.request("GET", "/health", headers={"Host": host})[0] == 200


# ---------------------------------------------------------------- store rules across processes
HOLDER = """
import sys
from mnn_engine import ModelStore
lock = ModelStore(sys.argv[1]).hold(sys.argv[2])
print("held", flush=True)
sys.stdin.read()
"""


def test_a_model_loaded_by_another_process_cannot_be_changed(tmp_path):
    store = ModelStore(tmp_path)
    store.import_model(test_model_dir("tiny"), model_id="tiny")
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(tmp_path), "tiny"], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, cwd="/")
    try:
        assert holder.stdout.readline().strip() == "held"
        for change in (lambda: store.delete("tiny"), lambda: store.rename("tiny", "other"),
                       lambda: store.clear_cache("tiny"),
                       lambda: store.import_model(test_model_dir("tiny"), model_id="tiny", replace=True)):
            with pytest.raises(MnnEngineError) as err:
                change()
            assert err.value.code == "model_in_use"
        assert store.exists("tiny")
    finally:
        holder.communicate("")
    store.delete("tiny")  # released with the process


def test_parallel_imports_of_one_id_let_exactly_one_win(tmp_path):
    home = {"MNN_ENGINE_HOME": str(tmp_path)}
    children = [subprocess.Popen([sys.executable, "-m", "mnn_engine", "models", "import", str(test_model_dir("tiny")),
                                  "--id", "same"], env={**os.environ, **home}, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True, cwd="/") for _ in range(4)]
    outcomes = [(c.wait(120), c.stderr.read()) for c in children]
    assert sorted(code for code, _ in outcomes) == [0, 2, 2, 2], outcomes
    assert all("model_exists" in err for code, err in outcomes if code == 2)
    assert [m.id for m in ModelStore(tmp_path).list()] == ["same"]


def test_a_model_with_a_broken_config_is_not_listed(tmp_path):
    store = ModelStore(tmp_path)
    store.import_model(test_model_dir("tiny"), model_id="good")
    broken = store.models_dir / "broken"
    broken.mkdir()
    (broken / "config.json").write_text("{not json")
    assert [m.id for m in store.list()] == ["good"]


# ---------------------------------------------------------------- leftovers
def test_scratch_directories_of_dead_processes_are_cleaned():
    stale = scratch_root() / "999999999-1"
    stale.mkdir(parents=True, exist_ok=True)
    (stale / "image.png").write_bytes(b"left by a crash")
    import mnn_engine.scratch as scratch

    scratch._mine = None  # as at the next process start
    mine = scratch_dir()
    assert mine.is_dir() and mine.name.startswith(f"{os.getpid()}-")
    assert not stale.exists()


# ---------------------------------------------------------------- descriptors run out
SERVE_LOW_FDS = """
import resource, sys
resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))
from mnn_engine.cli.main import main
sys.exit(main(sys.argv[1:]))
"""


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_running_out_of_descriptors_neither_spins_nor_floods_the_log(tmp_path):
    import socket

    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    log = open(tmp_path / "serve.log", "w+")  # noqa: SIM115 (the child writes it; closed below)
    child = subprocess.Popen([sys.executable, "-c", SERVE_LOW_FDS, "serve", str(test_model_dir("tiny")),
                              "--port", str(port), "--threads", "1"], stdout=log, stderr=log, cwd="/",
                             env={**os.environ, "MNN_ENGINE_HOME": str(tmp_path)})
    conns = []
    try:
        deadline = time.monotonic() + 120
        while "serving" not in (tmp_path / "serve.log").read_text():
            assert child.poll() is None and time.monotonic() < deadline, (tmp_path / "serve.log").read_text()
            time.sleep(0.1)
        for _ in range(80):  # idle connections: more than the process has descriptors for
            conns.append(socket.create_connection(("127.0.0.1", port), timeout=5))
        time.sleep(0.5)
        before = _cpu_seconds(child.pid)
        time.sleep(3)
        spent = _cpu_seconds(child.pid) - before
        assert spent < 0.5, f"the server used {spent:.2f} s of CPU in 3 s while out of descriptors"
        for conn in conns:
            conn.close()
        conns.clear()
        time.sleep(1)
        with socket.create_connection(("127.0.0.1", port), timeout=5) as conn:  # serving again
            conn.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
            assert conn.recv(100).startswith(b"HTTP/1.1 200")
    finally:
        for conn in conns:
            conn.close()
        child.terminate()
        child.wait(30)
        log.close()
    text = (tmp_path / "serve.log").read_text()
    assert text.count("Traceback") == 0 and len(text.splitlines()) < 40, text[-3000:]


# ---------------------------------------------------------------- transport-level errors
def _raw(server, data: bytes) -> bytes:
    import socket

    with socket.create_connection((server.host, server.port), timeout=10) as conn:
        conn.sendall(data)
        chunks = []
        with contextlib.suppress(ConnectionResetError):
            while chunk := conn.recv(65536):
                chunks.append(chunk)
        return b"".join(chunks)


POST = b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n" \
       b"Connection: close\r\n"


@pytest.fixture(scope="module")
def small_body_server(tmp_path_factory):
    live = Live(tmp_path_factory.mktemp("store"), "tiny", max_body_bytes=1000)
    yield live
    live.close()


def test_chunked_body_over_the_limit_is_413_json(small_body_server):
    body = json.dumps(_chat("a" * 1400)).encode()
    chunked = b"".join(b"%x\r\n%s\r\n" % (len(body[i:i + 100]), body[i:i + 100]) for i in range(0, len(body), 100))
    reply = _raw(small_body_server, POST + b"Transfer-Encoding: chunked\r\n\r\n" + chunked + b"0\r\n\r\n")
    head, _, payload = reply.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 413")
    assert json.loads(payload)["error"]["code"] == "payload_too_large"


@pytest.mark.parametrize("request_bytes", [
    POST + b"Transfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n",  # malformed chunk size
    POST + b"Content-Length: abc\r\n\r\n{}",  # not an integer
    POST + b"Transfer-Encoding: chunked\r\n\r\n" + b"%x\r\n" % 5000 + b"a" * 5000 + b"\r\n0\r\n\r\n",  # > 2x limit
])
def test_malformed_transport_gets_tornados_bare_400(small_body_server, request_bytes):
    """Tornado answers these itself, before any handler (docs/reliability.md)."""
    assert _raw(small_body_server, request_bytes).startswith(b"HTTP/1.1 400")
    assert small_body_server.request("GET", "/health")[0] == 200


def test_headers_over_64_kib_close_the_connection(small_body_server):
    reply = _raw(small_body_server, b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: " + b"a" * 70000 + b"\r\n\r\n")
    assert reply == b""
    assert small_body_server.request("GET", "/health")[0] == 200


# ---------------------------------------------------------------- the auth matrix
ROUTES = {"/": "GET", "/health": "GET", "/openapi.json": "GET", "/v1/models": "GET",
          "/v1/chat/completions": "POST", "/v1/completions": "POST", "/tokenize": "POST", "/metrics": "GET",
          "/api/tags": "GET", "/api/chat": "POST", "/v1/nope": None, "/nope": None}
CREDENTIALS = {"none": None, "right": f"Bearer {KEY}", "wrong": "Bearer wrong-key", "empty": "Bearer ",
               "basic": f"Basic {KEY}", "prefix": f"Bearer {KEY[:-1]}", "longer": f"Bearer {KEY}x"}


@pytest.fixture(scope="module")
def keyed_server(tmp_path_factory):
    live = Live(tmp_path_factory.mktemp("store"), "tiny", api_key=KEY)
    yield live
    live.close()


def _expected(route: str, method: str, credential: str) -> int:
    allowed = ROUTES[route]
    if method == "OPTIONS":
        return 404 if allowed is None else 204
    if allowed is None:
        return 404
    if route not in PUBLIC_PATHS and credential != "right":
        return 401
    if method != allowed:
        return 405
    return 400 if method == "POST" else 200  # POST with an empty body (read as JSON, whatever its type)


@pytest.mark.parametrize("credential", list(CREDENTIALS))
@pytest.mark.parametrize("method", ["GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"])
@pytest.mark.parametrize("route", list(ROUTES))
def test_auth_matrix(keyed_server, route, method, credential):
    headers = {} if CREDENTIALS[credential] is None else {"Authorization": CREDENTIALS[credential]}
    if method in ("POST", "PUT", "PATCH"):
        headers["Content-Type"] = "text/plain"
    status, reply_headers, body = keyed_server.request(method, route, "" if method in ("POST", "PUT", "PATCH")
                                                       else None, headers)
    assert status == _expected(route, method, credential), body
    if status >= 400:
        answer = json.loads(body)
        if route.startswith("/api/"):  # Ollama's shape: the message as "error", the code beside it
            assert answer["code"] and isinstance(answer["error"], str) and "Traceback" not in answer["error"]
        else:
            assert answer["error"]["code"] and "Traceback" not in answer["error"]["message"]
    if status == 401:
        assert reply_headers["www-authenticate"].startswith("Bearer")
