"""Hardening, round two: what a hostile client tried on the routes added
since the first round (tests/server/test_hostile.py), and the server's own limits.
Each test failed before its fix."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest
from fake_hub import FakeHub, Repo, repo_from_dir
from hypothesis import given, settings
from hypothesis import strategies as st
from live_server import Live, free_port, server_fixture
from support import REPO, test_model_dir

import mnn_engine
from mnn_engine import MnnEngineError, ModelStore
from mnn_engine.runtime import media, structured
from mnn_engine.runtime.grammar_sandbox import GrammarSandbox

server = server_fixture("tiny")

CHAT = [{"role": "user", "content": "hi"}]
#: 30,000 required names: SIGSEGV inside llguidance's matcher constructor on an 8 MiB stack
HUGE_REQUIRED = {"type": "object", "properties": {}, "required": [f"r{i}" for i in range(30_000)]}
#: schemas llguidance accepts at construction and fails on only at the first mask or later
LAZY = {
    "self_ref": {"$ref": "#"},
    "defs_loop": {"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"},
    "all_of_self": {"allOf": [{"$ref": "#"}]},
    "any_of_5000": {"anyOf": [{"type": "object", "properties": {f"k{i}": {"type": "integer"}}, "required": [f"k{i}"]}
                              for i in range(5000)]},
}


def _schema_format(schema):
    return {"type": "json_schema", "json_schema": {"name": "s", "schema": schema}}


def _alive(server):
    status, _, body = server.request("GET", "/health")
    assert status == 200 and json.loads(body)["status"] == "ok"


# ---------------------------------------------------------------- 1: a schema that crashed the server
@pytest.mark.parametrize("stream", [False, True])
def test_a_schema_that_crashed_llguidance_is_refused_and_the_server_lives(server, stream):
    status, _, body = server.post_json({"messages": CHAT, "stream": stream,
                                        "response_format": _schema_format(HUGE_REQUIRED)})
    assert status == 400 and body["error"]["param"] == "response_format", body
    assert "30000 required" in body["error"]["message"]
    _alive(server)


def test_the_engine_compiles_on_a_stack_that_survives_what_crashed_it():
    """The 30,000-name grammar (past the limits, straight to llguidance) on
    the engine's compile thread: llguidance's own error, not SIGSEGV. In a
    child, so a crash fails this test and not the suite."""
    code = """
import json, llguidance as ll
from mnn_engine.runtime import grammar
from mnn_engine.runtime.grammar_sandbox import byte_tokenizer
tokens = [bytes([i]) for i in range(256)] + [b"<eos>"]
tok = grammar.make_tokenizer(ll, tokens, [256], byte_tokenizer(tokens))
schema = {"type": "object", "properties": {}, "required": [f"r{i}" for i in range(30_000)]}
text = ll.LLMatcher.grammar_from_json_schema(json.dumps(schema))
try:
    grammar.compile_matcher(tok, text, "response_format")
except Exception as exc:
    print("refused:", exc.message)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd="/")
    assert out.returncode == 0, (out.returncode, out.stderr[-2000:])
    assert "refused: response_format: not supported: panic: assertion failed" in out.stdout
    assert "backtrace" not in out.stdout


def test_a_grammar_that_kills_the_compiler_kills_only_the_sandbox_child():
    """On a 1 MiB stack (Android's thread default) 5,000 required names
    overflow it: the child dies, the verdict is a refusal, the next check
    gets a new child."""
    import llguidance as ll

    sandbox = GrammarSandbox(stack_bytes=1024 * 1024)
    tokens = [bytes([i]) for i in range(256)] + [b"<eos>"]
    try:
        fatal = ll.LLMatcher.grammar_from_json_schema(json.dumps(
            {"type": "object", "properties": {}, "required": [f"r{i}" for i in range(8000)]}))
        verdict = sandbox.check(fatal, "bytes", lambda: (tokens, [256]))
        assert verdict is not None and "crashes the grammar compiler" in verdict
        assert sandbox.check(fatal, "bytes", lambda: (tokens, [256])) == verdict  # remembered, not re-run
        fine = ll.LLMatcher.grammar_from_json_schema(json.dumps({"type": "object"}))
        assert sandbox.check(fine, "bytes", lambda: (tokens, [256])) is None
    finally:
        sandbox.close()


class _CompilerThatNeverAnswers(GrammarSandbox):
    """The real sandbox's parent side over a child that reads the grammar and never answers: it
    stands for a schema that keeps llguidance busy for the whole check (round three, item 9: 59 s
    seen), without a minute of CPU in the test."""

    def _start(self):
        if self._child is None or self._child.poll() is not None:
            self._child = subprocess.Popen([sys.executable, "-c", "import sys, time; sys.stdin.buffer.read(8); "
                                            "time.sleep(600)"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
            self._vocabularies = set()
        return self._child


def test_a_grammar_check_neither_holds_the_turn_nor_outlives_its_client(server, monkeypatch):
    """A new grammar's sandbox check ran inside the generation turn: a plain chat waited the whole
    check, and still did after the check's client left. Now the check runs outside the turn and
    ends (its child killed) when its client goes."""
    from mnn_engine.runtime import structured as structured_module

    sandbox = _CompilerThatNeverAnswers()
    monkeypatch.setattr(structured_module, "_sandbox", sandbox)
    body = json.dumps({"messages": CHAT, "max_tokens": 4, "response_format": _schema_format(
        {"type": "object", "properties": {"never": {"type": "string"}}})}).encode()
    checking = socket.create_connection((server.host, server.port), timeout=30)
    try:
        checking.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
                         b"application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
        deadline = time.monotonic() + 30
        while sandbox._child is None and time.monotonic() < deadline:
            time.sleep(0.02)
        child = sandbox._child
        assert child is not None, "the check did not start"
        status, _, answer = server.post_json({"messages": CHAT, "max_tokens": 4})
        assert status == 200, answer
        assert child.poll() is None, "the plain chat was answered only after the check ended"
    finally:
        checking.close()  # the check's client leaves
    child.wait(timeout=10)  # the check stopped with it, not at its 60 s bound
    assert server.post_json({"messages": CHAT, "max_tokens": 4})[0] == 200
    sandbox.close()


@pytest.mark.parametrize("limit, schema", [
    ("properties", {"type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(5001)}}),
    ("required", {"type": "object", "required": [f"p{i}" for i in range(5001)]}),
    ("enum", {"enum": list(range(10_001))}),
    ("alternatives", {"anyOf": [{"const": i} for i in range(1001)]}),
    ("depth", {"items": json.loads("[" * 40 + "]" * 40)}),
    ("bytes", {"description": "x" * (512 * 1024)}),
])
def test_schema_limits_are_checked_before_llguidance(limit, schema):
    with pytest.raises(structured.MnnEngineError) as err:
        structured.check_schema_limits(schema, "response_format")
    assert err.value.param == "response_format" and err.value.code == "invalid_argument"
    assert str(structured.SCHEMA_LIMITS[limit]) in err.value.message


# ---------------------------------------------------------------- 5: errors found lazily are 400 at once
@pytest.mark.parametrize("name", sorted(LAZY))
@pytest.mark.parametrize("stream", [False, True])
def test_lazy_grammar_errors_are_400_on_chat(server, name, stream):
    status, _, body = server.post_json({"messages": CHAT, "stream": stream, "max_tokens": 8,
                                        "response_format": _schema_format(LAZY[name])})
    assert status == 400 and body["error"]["param"] == "response_format", body


@pytest.mark.parametrize("stream", [False, True])
def test_lazy_grammar_errors_are_400_on_ollama_format(server, stream):
    status, _, raw = server.request("POST", "/api/chat", json.dumps(
        {"model": "tiny", "messages": CHAT, "stream": stream, "format": LAZY["self_ref"]}))
    body = json.loads(raw)
    assert status == 400 and body["error"].startswith("format: not supported"), body


@pytest.mark.parametrize("stream", [False, True])
def test_lazy_grammar_errors_are_400_on_completions(server, stream):
    status, _, raw = server.request("POST", "/v1/completions", json.dumps(
        {"prompt": "hi", "stream": stream, "max_tokens": 8, "response_format": _schema_format(LAZY["defs_loop"])}))
    body = json.loads(raw)
    assert status == 400 and body["error"]["param"] == "response_format", body


@pytest.mark.parametrize("stream", [False, True])
def test_a_required_tool_with_recursive_parameters_is_400_naming_tools(server, stream):
    tool = {"type": "function", "function": {"name": "f", "parameters": {"$ref": "#"}}}
    status, _, body = server.post_json({"messages": CHAT, "stream": stream, "max_tokens": 8, "tools": [tool],
                                        "tool_choice": "required"})
    assert status == 400 and body["error"]["param"] == "tools", body
    _alive(server)


# ---------------------------------------------------------------- 2: media tags in raw text
HOSTILE_TAGS = "<img>/etc/passwd</img> and <audio>/dev/zero</audio> and <IMG>/x</IMG>"


def _unguarded(server, text):
    with server.engine.llm._using() as core:  # straight to MNN, past the guard
        return core.tokenize(text)


def test_the_tokenizer_route_guards_media_tags(server):
    status, _, raw = server.request("POST", "/tokenize", json.dumps({"content": HOSTILE_TAGS}))
    assert status == 200
    ids = json.loads(raw)["tokens"]
    assert ids == _unguarded(server, media.guard(HOSTILE_TAGS)) != _unguarded(server, HOSTILE_TAGS)


def test_raw_prompts_reach_mnn_guarded(server):
    guarded = len(server.engine.llm.tokenize(HOSTILE_TAGS))
    assert guarded != len(_unguarded(server, HOSTILE_TAGS))
    status, _, raw = server.request("POST", "/v1/completions", json.dumps(
        {"prompt": HOSTILE_TAGS, "max_tokens": 1, "echo": True}))
    body = json.loads(raw)
    assert status == 200 and body["usage"]["prompt_tokens"] == guarded, body
    assert body["choices"][0]["text"].startswith(HOSTILE_TAGS)  # echo gives back what the client sent
    status, _, raw = server.request("POST", "/api/generate", json.dumps(
        {"model": "tiny", "prompt": HOSTILE_TAGS, "raw": True, "stream": False, "options": {"num_predict": 1}}))
    body = json.loads(raw)
    assert status == 200 and body["prompt_eval_count"] == guarded, body


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(["<img>", "</img>", "<audio>", "</audio>", "<video>", "<hw>", "</IMG>", "/p", "x",
                                 "<", ">", "\u2060"]), max_size=12).map("".join))
def test_guarded_text_opens_no_tag_but_registered_ones(text):
    with media.trusted("/p"):
        guarded = media.guard(text + "<img>/p</img>")
        assert guarded.endswith("<img>/p</img>")
        rest = guarded.replace("<img>/p</img>", "")
        assert not re.search(r"</?(img|audio|video|hw)>", rest, re.IGNORECASE), guarded
    assert "<img>" not in media.guard("<img>/p</img>")  # no longer registered


# ---------------------------------------------------------------- 3, 4, 7, 11: pulls
@pytest.fixture(scope="module")
def small_repo():
    return Repo("b" * 40, {"config.json": b"{}", "llm.mnn": b"x" * 1000})


@pytest.fixture
def hub(monkeypatch):
    with FakeHub() as fake:
        monkeypatch.setenv("HF_ENDPOINT", fake.url)
        monkeypatch.setenv("MODELSCOPE_DOMAIN", fake.url)
        yield fake


def _pull(server, spec, stream=False, **extra):
    status, _, raw = server.request("POST", "/api/pull", json.dumps({"model": spec, "stream": stream, **extra}))
    if stream:
        return status, [json.loads(line) for line in raw.splitlines() if line.strip()]
    return status, json.loads(raw)


def test_a_client_cannot_make_the_server_fetch_local_urls(server, hub, small_repo):
    """Refused before any request: the far side's answer (refused, 404, 500,
    not JSON) can no longer be told apart, so no port scan."""
    url = hub.add_manifest("m", small_repo)
    answers = set()
    for spec in (url, f"{hub.url}/nothing.json", "http://127.0.0.1:1/x", "https://127.0.0.1:1/x",
                 "https://[::1]:1/x", "https://10.0.0.1/x", "https://localhost/x", "file:///etc/passwd"):
        status, body = _pull(server, spec)
        assert status in (403, 404), (spec, body)
        answers.add((status, body["code"]))
    assert answers == {(403, "pull_refused"), (404, "model_not_found")}  # 404: file:... is no URL spec at all
    assert hub.requests == []  # not even the manifest was fetched


def test_the_operator_can_allow_a_local_manifest(tmp_path_factory, hub):
    live = Live(tmp_path_factory.mktemp("allow"), "tiny", allow_pull_urls=[hub.url + "/manifests/*"])
    try:
        status, lines = _pull(live, hub.add_manifest("m", repo_from_dir(test_model_dir("tiny-scripted"))), stream=True)
        assert status == 200 and lines[-1].get("status") == "success", lines
    finally:
        live.close()


@pytest.mark.parametrize("link", ["file:///etc/passwd", "ftp://127.0.0.1/x", "data:text/plain,hello",
                                  "https://127.0.0.1:1/x"])
def test_a_manifest_cannot_name_a_local_file_or_host(tmp_path, hub, small_repo, link):
    url = hub.add_manifest("m", small_repo)
    hub.manifests["m"][0]["files"][1]["url"] = link
    from mnn_engine.hub.sources import UrlPolicy

    with pytest.raises(MnnEngineError) as err:
        ModelStore(tmp_path).pull(url, policy=UrlPolicy(public_only=link.startswith("https")), backoff=(0.01,))
    assert err.value.code == "pull_refused", err.value
    assert "passwd" not in json.dumps(os.listdir(tmp_path))


def test_a_source_that_ignores_ranges_and_ends_early_is_given_up(tmp_path, hub, small_repo):
    hub.faults.short_ignoring_range["llm.mnn"] = 10
    url = hub.add_manifest("m", small_repo)
    with pytest.raises(MnnEngineError) as err:
        ModelStore(tmp_path).pull(url, backoff=(0.01,))
    assert err.value.code == "pull_failed" and "ignores byte ranges" in err.value.message
    assert sum(path == "llm.mnn" for path, _ in hub.ranges) <= 2 * (5 + 1)  # was 107,795 before


DEEP = b'{"a":' * 100_000 + b"1" + b"}" * 100_000


@pytest.mark.parametrize("case", ["deep", "version", "nul_path", "long_path", "entry", "lfs", "not_json"])
def test_hostile_listings_end_the_pull_stream_with_an_error(tmp_path_factory, hub, small_repo, case):
    manifest = {"format": "mnn-engine-manifest/1", "id": "m", "version": "1",
                "files": [{"path": "a", "size": 1, "sha256": "0" * 64}]}
    spec = f"{hub.url}/manifests/m.json"
    if case == "deep":
        hub.raw_manifests["m"] = DEEP
    elif case == "version":
        hub.raw_manifests["m"] = json.dumps({**manifest, "min_engine_version": "9" * 5000}).encode()
    elif case == "nul_path":
        manifest["files"][0]["path"] = "a\x00b"
        hub.raw_manifests["m"] = json.dumps(manifest).encode()
    elif case == "long_path":
        manifest["files"][0]["path"] = "a" * 5000
        hub.raw_manifests["m"] = json.dumps(manifest).encode()
    elif case == "not_json":
        hub.raw_manifests["m"] = b"<html>"
    else:  # a Hugging Face tree listing with a non-object entry, or a non-object lfs entry
        spec = "hf:org/repo"
        item = 5 if case == "entry" else {"type": "file", "path": "a", "size": 1, "lfs": [1]}
        hub.raw_hf_info["org/repo"] = json.dumps({"sha": "c" * 40, "siblings": []}).encode()
        hub.raw_hf_tree["org/repo"] = json.dumps([item]).encode()
    live = Live(tmp_path_factory.mktemp(case), "tiny", allow_pull_urls=[hub.url + "/*"])
    try:
        status, lines = _pull(live, spec, stream=True)
        assert status == 200 and "error" in lines[-1] and lines[-1]["http_status"] in (400, 403, 422, 502), lines
        assert lines[-1]["code"] != "internal_error", lines
        status, body = _pull(live, spec)
        assert status in (400, 403, 422, 502) and body["code"] != "internal_error", body
    finally:
        live.close()


def test_trickling_pulls_do_not_hold_the_tokenizer_routes(tmp_path_factory, hub, small_repo):
    hub.faults.chunk, hub.faults.delay_s = 1, 0.5  # a byte every half second
    live = Live(tmp_path_factory.mktemp("trickle"), "tiny", allow_pull_urls=[hub.url + "/*"])
    results = []

    def pull(i):
        try:
            results.append(_pull(live, hub.add_manifest(f"m{i}", small_repo)))
        except (OSError, ValueError) as exc:  # the server closed the connection when it stopped
            results.append(exc)

    try:
        pulls = [threading.Thread(target=pull, args=(i,)) for i in range(8)]
        for thread in pulls:
            thread.start()
        deadline = time.monotonic() + 30
        while sum(path == "llm.mnn" for path, _ in hub.ranges) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        status, _, raw = live.request("POST", "/tokenize", json.dumps({"content": "hello"}))
        assert status == 200 and json.loads(raw)["tokens"]
        assert not results  # the pulls are still running: /tokenize did not wait for them
    finally:
        live.close()  # stops the pulls
    for thread in pulls:
        thread.join(10)
        assert not thread.is_alive()


class _TrickledManifests:
    """A manifest host that answers 200 and then one byte every 50 ms, and records when each
    client hung up (round three, item 3's host)."""

    def __init__(self) -> None:
        import http.server

        hung_up = self.hung_up = threading.Semaphore(0)

        class Trickle(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                try:
                    for _ in range(2400):  # two minutes, past the listing deadline
                        self.wfile.write(b" ")
                        self.wfile.flush()
                        time.sleep(0.05)
                except OSError:
                    hung_up.release()

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Trickle)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()


def test_a_pull_whose_client_left_frees_its_worker_while_the_listing_trickles(tmp_path_factory, hub):
    """Two pulls of trickling manifests held both pull workers until the listing deadline, even
    after their clients left (the stop was looked at only between downloaded chunks): a third
    client's pull waited. The stop is now looked at while a listing is read, and a pull whose client
    left before a worker took it never starts."""
    slow = _TrickledManifests()
    live = Live(tmp_path_factory.mktemp("left"), "tiny", allow_pull_urls=[hub.url + "/*", slow.url + "/*"])
    leaving = []
    try:
        for i in range(3):  # two hold the workers, the third waits for one
            conn = socket.create_connection((live.host, live.port), timeout=30)
            body = json.dumps({"model": f"{slow.url}/m{i}.json", "stream": True}).encode()
            conn.sendall(b"POST /api/pull HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                         b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
            assert conn.recv(12).startswith(b"HTTP/1.1 200")
            leaving.append(conn)
        time.sleep(0.5)
        # the waiting client leaves first, and the server is given time to see it: closed together, a worker
        # freed by the first close could take the third pull before the IOLoop had read its close (then that
        # listing starts and is given up at once: a race in the test, not a pull that outlived its client)
        leaving[2].close()
        time.sleep(0.5)
        for conn in leaving[:2]:
            conn.close()
        for _ in range(2):  # the two running listings are given up (not at their 60 s deadline)
            assert slow.hung_up.acquire(timeout=15), "a listing went on after its client left"
        status, body = _pull(live, hub.add_manifest("fine", repo_from_dir(test_model_dir("tiny-scripted"))))
        assert status == 200 and body["status"] == "success", body
        assert not slow.hung_up.acquire(timeout=1), "the pull queued behind them started after its client left"
    finally:
        live.close()
        slow.close()


# ---------------------------------------------------------------- 8, 14: what Tornado answers and logs
auth_server = server_fixture("tiny", api_key="s3cret-key", max_body_bytes=64 * 1024)


def _raw(server, payload: bytes, timeout: float = 10.0) -> bytes:
    with socket.create_connection((server.host, server.port), timeout=timeout) as conn:
        conn.sendall(payload)
        chunks = []
        with contextlib.suppress(ConnectionResetError, TimeoutError):
            while chunk := conn.recv(65536):
                chunks.append(chunk)
        return b"".join(chunks)


def _json_answer(raw: bytes) -> tuple[int, dict]:
    head, _, body = raw.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body)


@pytest.mark.parametrize("request_bytes, status", [
    (b"Content-Length: abc\r\n\r\n{}", 400),
    (b"Transfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n", 400),
    (b"Content-Length: 2\r\nContent-Length: 3\r\n\r\n{}", 400),
    (b"Transfer-Encoding: chunked\r\n\r\n" + (b"8000\r\n" + b"x" * 0x8000 + b"\r\n") * 6 + b"0\r\n\r\n", 413),
])
def test_requests_tornado_refuses_get_a_json_error(auth_server, request_bytes, status):
    head = b"POST /tokenize HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer s3cret-key\r\n"
    got, body = _json_answer(_raw(auth_server, head + request_bytes))
    assert got == status and body["error"]["code"] in ("invalid_argument", "payload_too_large"), body
    assert body["error"]["message"].startswith("malformed HTTP request")


def test_headers_over_the_limit_close_the_connection_unanswered(auth_server):
    """Pinned: Tornado's IOStream closes the connection itself once the
    headers pass 64 KiB, before any of our code can answer (http_server.py)."""
    raw = _raw(auth_server, b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: " + b"a" * 70_000 + b"\r\n\r\n")
    assert raw == b""


def test_no_log_line_carries_the_api_key(auth_server, caplog):
    caplog.set_level(logging.DEBUG)
    for header in (b"Authorization: Bearer s3cret-key\x00", b"Authorization: Bearer s3cret-key\x01x",
                   b"X-Key: \"s3cret-key\"\r\n bad fold"):
        _raw(auth_server, b"GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\n" + header + b"\r\n\r\n")
    time.sleep(0.2)
    assert any("Malformed HTTP message" in r.getMessage() for r in caplog.records)
    assert not [r.getMessage() for r in caplog.records if "s3cret" in r.getMessage()]


# ---------------------------------------------------------------- 9, 10: limits that locked everyone out
def test_slowloris_and_idle_subscribers_do_not_lock_out_chats(tmp_path_factory):
    live = Live(tmp_path_factory.mktemp("lockout"), "tiny-scripted")
    held: list[socket.socket] = []
    try:
        for _ in range(400):  # headers started, never finished
            conn = socket.create_connection((live.host, live.port), timeout=10)
            conn.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
            held.append(conn)
        for _ in range(260):
            conn = socket.create_connection((live.host, live.port), timeout=10)
            conn.sendall(b"GET /events HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            held.append(conn)
        time.sleep(0.5)
        for _ in range(3):
            status, _, body = live.post_json({"messages": CHAT, "max_tokens": 4})
            assert status == 200, body
            assert live.request("GET", "/health")[0] == 200
    finally:
        for conn in held:
            conn.close()
        live.close()


def test_stalled_request_bodies_do_not_lock_out_health_or_chats(tmp_path_factory):
    """Round three, item 1: 70 chat requests whose bodies stall after a few bytes once took every
    loopback place (a body being read counted as busy, and loopback is one client): /health and
    chats got resets. The slowest bodies now give their place to new clients, and the sweep drops
    them once they trickle below the minimum rate past their grace."""
    from mnn_engine.server.http_server import BODY_GRACE_S, SWEEP_INTERVAL_S

    live = Live(tmp_path_factory.mktemp("stalled"), "tiny-scripted")
    held: list[socket.socket] = []
    try:
        for _ in range(70):
            conn = socket.create_connection((live.host, live.port), timeout=10)
            conn.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                         b"Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"mess")
            held.append(conn)
        time.sleep(0.3)
        for _ in range(3):  # while the stalled bodies are within their grace: they give way
            assert live.request("GET", "/health")[0] == 200
            status, _, body = live.post_json({"messages": CHAT, "max_tokens": 4})
            assert status == 200, body
        time.sleep(BODY_GRACE_S + 2 * SWEEP_INTERVAL_S)
        for conn in held:  # every stalled body was dropped: the server closed its side
            conn.settimeout(5)
            with contextlib.suppress(ConnectionResetError):
                assert conn.recv(1) == b""
    finally:
        for conn in held:
            conn.close()
        live.close()


def test_a_streamed_answer_is_not_closed_for_a_newcomer(tmp_path_factory):
    """A connection whose answer is still being written is never the one closed for a new
    connection: it used to count as idle once its body was read (a streamed chat or a subscriber
    could be cut for a slowloris)."""
    live = Live(tmp_path_factory.mktemp("streaming"), "tiny-scripted")
    held: list[socket.socket] = []
    try:
        subscriber = socket.create_connection((live.host, live.port), timeout=10)
        subscriber.sendall(b"GET /events HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        assert subscriber.recv(12).startswith(b"HTTP/1.1 200")
        for _ in range(300):  # slowlorises past the whole limit and the client's share
            conn = socket.create_connection((live.host, live.port), timeout=10)
            conn.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
            held.append(conn)
        time.sleep(0.3)
        assert live.request("GET", "/health")[0] == 200
        subscriber.setblocking(False)
        with contextlib.suppress(BlockingIOError):  # what was sent is read; then it would block: still open
            while True:
                assert subscriber.recv(65536) != b"", "the subscriber was closed"
    finally:
        for conn in [*held, subscriber]:
            conn.close()
        live.close()


def test_a_subscriber_that_does_not_read_is_dropped_and_events_are_serialised_once():
    from mnn_engine.engine.events import EventStream
    from mnn_engine.server.events import BUFFERED_FRAMES, MAX_SUBSCRIBERS, EventFanout

    async def scenario():
        events = EventStream()
        fanout = EventFanout(events, asyncio.get_running_loop())
        dropped = []
        stalled = fanout.subscribe(lambda: dropped.append(1))
        reader = fanout.subscribe(lambda: dropped.append(2))
        for i in range(BUFFERED_FRAMES + 1):
            events.emit("generation", "running", n=i)
            await asyncio.sleep(0)
            await reader.get()
        await asyncio.sleep(0)
        assert dropped == [1] and fanout.dropped == 1 and stalled not in fanout.subscribers
        events.emit("generation", "idle")
        await asyncio.sleep(0.01)
        assert reader.qsize() == 1
        for _ in range(MAX_SUBSCRIBERS - 1):  # the cap: 260 idle subscribers once held every connection
            fanout.subscribe(lambda: None)
        with pytest.raises(MnnEngineError) as err:
            fanout.subscribe(lambda: None)
        assert err.value.code == "server_busy"
        fanout.close()

    asyncio.run(scenario())


# ---------------------------------------------------------------- 6: Ollama's earlier tool calls
@pytest.mark.parametrize("calls", [[{"function": "x"}], 5, [1], [{"function": {"arguments": {}}}]])
def test_malformed_ollama_tool_calls_are_400_naming_the_field(server, calls):
    messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "", "tool_calls": calls}]
    status, _, raw = server.request("POST", "/api/chat", json.dumps({"model": "tiny", "messages": messages,
                                                                     "stream": False}))
    body = json.loads(raw)
    assert status == 400 and body["code"] == "invalid_argument" and "tool_calls" in body["error"], body


# ---------------------------------------------------------------- 13: memory under distinct text
@pytest.mark.skipif(mnn_engine.build_info()["mode"] == "wheel",
                    reason="the PyPI wheel's MNN is not patched (its tokenizer caches every word: +45 MiB per 1,000)")
def test_memory_does_not_grow_with_distinct_text():
    """MNN's tokenizer cached every distinct word (+30.5 MiB per 1,000
    requests of ~2 KB of new words); our patch bounds the cache. Measured in
    fresh processes by the benchmark's own code, after its warm-up."""
    sys.path.insert(0, str(REPO / "tools" / "bench"))
    try:
        from distinct_text_memory import run
    finally:
        sys.path.pop(0)
    result = run(str(test_model_dir("tiny")), 1000, True, False)
    assert result["late_growth_mib_per_1000"] < 2.0, result


# ---------------------------------------------------------------- 4: SIGTERM with a pull stuck on a trickle
def test_sigterm_ends_the_server_while_a_pull_trickles(tmp_path, hub, small_repo):
    """A pull reading a byte every second once kept the process alive 40 s
    after "server stopped" (the default executor is joined at exit)."""
    hub.faults.chunk, hub.faults.delay_s = 1, 1.0
    url = hub.add_manifest("m", small_repo)
    env = {**os.environ, "MNN_ENGINE_HOME": str(tmp_path / "home")}
    free = free_port()  # (the CLI takes 1-65535)
    proc = subprocess.Popen([sys.executable, "-m", "mnn_engine", "serve", str(test_model_dir("tiny")),
                             "--port", str(free), "--threads", "1", "--allow-pull-url", hub.url + "/*"],
                            stderr=subprocess.PIPE, text=True, env=env, cwd="/")
    try:
        line = ""
        while "serving" not in line:
            line = proc.stderr.readline()
            assert line or proc.poll() is None, "the server did not start"
        base = line.rsplit(" at ", 1)[1].split()[0]
        host, port = base.removeprefix("http://").rsplit(":", 1)
        conn = socket.create_connection((host, int(port)), timeout=30)
        body = json.dumps({"model": url, "stream": True}).encode()
        conn.sendall(b"POST /api/pull HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                     b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
        deadline = time.monotonic() + 30
        while sum(path == "llm.mnn" for path, _ in hub.ranges) < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(1.5)  # bytes are trickling
        proc.send_signal(signal.SIGTERM)
        started = time.monotonic()
        proc.wait(timeout=20)
        assert time.monotonic() - started < 10, "the process outlived SIGTERM"
        assert proc.returncode == 0
        conn.close()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_sigterm_during_pulls_answers_both_clients_with_an_error_and_logs_no_traceback(tmp_path, hub, small_repo):
    """Round three, item 6: SIGTERM during a pull cut a streamed client's NDJSON off without an error
    line, left a non-streamed one without an answer, and logged "Cannot send error response after
    headers written" and "Future exception was never retrieved"."""
    hub.faults.chunk, hub.faults.delay_s = 1, 0.5
    env = {**os.environ, "MNN_ENGINE_HOME": str(tmp_path / "home")}
    free = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "mnn_engine", "serve", str(test_model_dir("tiny")),
                             "--port", str(free), "--threads", "1", "--allow-pull-url", hub.url + "/*"],
                            stderr=subprocess.PIPE, text=True, env=env, cwd="/")
    clients = []
    try:
        line = ""
        while "serving" not in line:
            line = proc.stderr.readline()
            assert line or proc.poll() is None, "the server did not start"
        for i, stream in enumerate((True, False)):
            conn = socket.create_connection(("127.0.0.1", free), timeout=30)
            body = json.dumps({"model": hub.add_manifest(f"m{i}", small_repo), "stream": stream}).encode()
            conn.sendall(b"POST /api/pull HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                         b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
            clients.append(conn)
        deadline = time.monotonic() + 30
        while sum(path == "llm.mnn" for path, _ in hub.ranges) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(1.0)  # both are downloading, a byte every half second
        proc.send_signal(signal.SIGTERM)
        answers = []
        for conn in clients:
            chunks = []
            with contextlib.suppress(ConnectionResetError):
                while chunk := conn.recv(65536):
                    chunks.append(chunk)
            answers.append(b"".join(chunks))
            conn.close()
        proc.wait(timeout=30)
        log = proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    streamed, whole = answers
    last = json.loads([line for line in streamed.splitlines() if line.startswith(b"{")][-1])  # (chunked)
    assert last.get("code") == "server_stopping" and "error" in last, streamed[-300:]
    assert whole.startswith(b"HTTP/1.1 503") and b"server_stopping" in whole, whole[:300]
    for bad in ("Traceback", "Cannot send error response", "Future exception was never retrieved"):
        assert bad not in log, log


#: a server whose generation never returns: the fake stands for MNN's stb_image looping for good inside the
#: tokenizer on a cut PNG (round three, item 7), a C call no Python signal can interrupt on that thread
RUNAWAY_SERVER = """
import sys, time
from mnn_engine.cli.main import main
from mnn_engine.runtime.generation import PreparedGeneration
from mnn_engine.server import runner

runner.EXIT_DEADLINE_SECONDS = 3.0

def runaway(self, *args, **kwargs):
    time.sleep(3600)

PreparedGeneration.run = runaway
sys.exit(main(sys.argv[1:]))
"""


def test_sigterm_ends_the_server_whose_generation_never_returns(tmp_path):
    env = {**os.environ, "MNN_ENGINE_HOME": str(tmp_path / "home")}
    free = free_port()
    proc = subprocess.Popen([sys.executable, "-c", RUNAWAY_SERVER, "serve", str(test_model_dir("tiny-scripted")),
                             "--port", str(free), "--threads", "1"], stderr=subprocess.PIPE, text=True, env=env,
                            cwd="/")
    try:
        line = ""
        while "serving" not in line:
            line = proc.stderr.readline()
            assert line or proc.poll() is None, "the server did not start"
        conn = socket.create_connection(("127.0.0.1", free), timeout=30)
        body = json.dumps({"messages": CHAT, "max_tokens": 4}).encode()
        conn.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                     b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
        time.sleep(1.0)  # the generation has started and will not return
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)  # before the deadline existed: never
        assert proc.returncode == 1
        assert "did not stop within 3 s" in proc.stderr.read()
        conn.close()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_a_manifest_host_that_trickles_is_given_up_at_the_listing_deadline(tmp_path, monkeypatch):
    """A host that answers 200 and then a byte at a time held a pull worker
    for as long as it liked (only the per-read timeout applied): a listing
    must arrive within LISTING_DEADLINE_S, whatever its rate."""
    from mnn_engine.hub import sources

    slow = _TrickledManifests()
    monkeypatch.setattr(sources, "LISTING_DEADLINE_S", 0.5)
    started = time.monotonic()
    try:
        with pytest.raises(MnnEngineError) as err:
            ModelStore(tmp_path).pull(f"{slow.url}/manifests/m.json", backoff=(0.01,))
    finally:
        slow.close()
    assert err.value.code == "pull_failed" and "had not finished" in err.value.message
    assert time.monotonic() - started < 10
