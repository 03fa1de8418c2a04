"""Serving the whole store (issue 30): three models in a store (two chat,
one embedding), requests that name them in every dialect, loads on demand,
keep-alive, idle expiry, LRU eviction, a load that fails, the ollama client.

The scripted model always says SCRIPTED_TEXT; the tiny model says random
text of its own, so an answer shows which model made it."""

from __future__ import annotations

import http.client
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.parse
from concurrent.futures import ThreadPoolExecutor

import ollama
import openai
import pytest
from live_server import free_port, sse_events
from support import SCRIPTED_TEXT, test_model_dir

from mnn_engine import ModelPool, ModelStore
from mnn_engine.runtime.memory import rss_bytes

CHAT = [{"role": "user", "content": "Who are you?"}]


def _store(root) -> ModelStore:
    store = ModelStore(root)
    store.import_model(test_model_dir("tiny-scripted"), model_id="scripted")
    store.import_model(test_model_dir("tiny"), model_id="tiny")
    store.import_model(test_model_dir("tiny-embedding"), model_id="embed")
    return store


class Served:
    """A ModelPool over a three-model store, served on loopback."""

    def __init__(self, root, **pool_options) -> None:
        self.store = _store(root)
        pool_options.setdefault("defaults", {"threads": 1})
        self.pool = ModelPool(self.store, **pool_options)
        self.events: list = []
        self.pool.events.subscribe(self.events.append)
        self.url = self.pool.start_server(port=0)
        parts = urllib.parse.urlsplit(self.url)
        self.host, self.port = parts.hostname, parts.port
        self.openai = openai.OpenAI(base_url=self.url + "/v1", api_key="none", max_retries=0, timeout=60)
        self.ollama = ollama.Client(host=self.url, timeout=60)

    def request(self, method: str, path: str, body=None) -> tuple[int, bytes]:
        conn = http.client.HTTPConnection(self.host, self.port, timeout=60)
        try:
            conn.request(method, path, None if body is None else json.dumps(body),
                         {"Content-Type": "application/json"})
            response = conn.getresponse()
            return response.status, response.read()
        finally:
            conn.close()

    def loaded(self) -> list[str]:
        models = json.loads(self.request("GET", "/api/ps")[1])["models"]
        return sorted(m["name"].removesuffix(":latest") for m in models)

    def wait_loaded(self, expected: list[str], timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while self.loaded() != expected:
            assert time.monotonic() < deadline, f"loaded: {self.loaded()}, expected {expected}"
            time.sleep(0.02)

    def unloads(self) -> list[tuple[str, str]]:
        return [(e.data.get("model_id"), e.data.get("reason")) for e in self.events
                if e.kind == "model" and e.state == "unloaded"]

    def wait_unloads(self, expected: list[tuple[str, str]], timeout: float = 10.0) -> None:
        """Until the unload events are ``expected`` (in any order): a model the
        reaper expires leaves /api/ps when it starts unloading, before its
        engine reports the unload."""
        deadline = time.monotonic() + timeout
        while sorted(self.unloads()) != sorted(expected):
            assert time.monotonic() < deadline, f"unloads: {self.unloads()}, expected {expected}"
            time.sleep(0.02)

    def close(self) -> None:
        self.pool.close()


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """Room for all three: they stay loaded between tests."""
    s = Served(tmp_path_factory.mktemp("store"), max_loaded=3, keep_alive=None)
    yield s
    s.close()


# ---------------------------------------------------------------- names pick models, in every dialect
def test_the_model_field_picks_the_model_in_every_dialect_stream_or_not(served):
    tiny_texts = set()
    for _ in range(2):  # alternating, each answer from the model it named
        for stream in (False, True):
            answer = served.openai.chat.completions.create(model="scripted", messages=CHAT, temperature=0,
                                                           stream=stream)
            text = "".join(c.choices[0].delta.content or "" for c in answer if c.choices) if stream \
                else answer.choices[0].message.content
            assert text == SCRIPTED_TEXT
            answer = served.openai.chat.completions.create(model="tiny", messages=CHAT, temperature=0,
                                                           max_tokens=12, stream=stream)
            text = "".join(c.choices[0].delta.content or "" for c in answer if c.choices) if stream \
                else answer.choices[0].message.content
            assert text != SCRIPTED_TEXT
            tiny_texts.add(text)
            reply = served.ollama.chat(model="scripted", messages=CHAT, options={"temperature": 0}, stream=stream)
            text = "".join(part.message.content for part in reply) if stream else reply.message.content
            assert text == SCRIPTED_TEXT
            reply = served.ollama.generate(model="tiny:latest", prompt="Who are you?", stream=stream,
                                           options={"temperature": 0, "num_predict": 12})
            text = "".join(part.response for part in reply) if stream else reply.response
            assert text != SCRIPTED_TEXT
            completion = served.openai.completions.create(model="scripted", prompt="Hello", max_tokens=4,
                                                          temperature=0)
            assert completion.model == "scripted"
    assert len(tiny_texts) == 1  # the tiny model, greedy: the same answer each time, stream or not
    vector = served.openai.embeddings.create(model="embed", input="hello").data[0].embedding
    assert len(vector) > 8
    assert len(served.ollama.embed(model="embed", input=["a", "b"]).embeddings) == 2
    with pytest.raises(openai.BadRequestError) as err:  # a chat model does not embed: the model named says so
        served.openai.embeddings.create(model="tiny", input="hello")
    assert err.value.code == "wrong_model_kind"
    assert served.loaded() == ["embed", "scripted", "tiny"]


def test_every_model_in_the_store_is_listed_loaded_or_not(tmp_path):
    s = Served(tmp_path, max_loaded=1, keep_alive=None)
    try:
        listed = {m.id: m for m in s.openai.models.list().data}
        assert set(listed) == {"scripted", "tiny", "embed"}
        assert not any(m.model_extra["loaded"] for m in listed.values())
        assert listed["embed"].model_extra["kind"] == "embedding"
        assert listed["tiny"].model_extra["context_length"] == 2048
        assert {m.model for m in s.ollama.list().models} == {"scripted:latest", "tiny:latest", "embed:latest"}
        assert s.ollama.ps().models == []
        s.openai.chat.completions.create(model="tiny", messages=CHAT, max_tokens=2)
        assert s.openai.models.retrieve("tiny").model_extra["loaded"] is True
        ps = s.ollama.ps().models
        assert [m.model for m in ps] == ["tiny:latest"] and ps[0].context_length == 2048
    finally:
        s.close()


@pytest.mark.parametrize("name", ["nope", "qwen3-0.6b", "qwen3:0.6b"])
def test_a_name_the_store_lacks_is_404_in_each_dialect(served, name):
    with pytest.raises(openai.NotFoundError) as err:
        served.openai.chat.completions.create(model=name, messages=CHAT)
    assert err.value.code == "model_not_found"
    catalog = name != "nope"
    assert ("models pull qwen3-0.6b" in err.value.message) is catalog  # the way to get it, never a download
    for path, body in (("/v1/completions", {"model": name, "prompt": "hi"}),
                       ("/v1/embeddings", {"model": name, "input": "hi"}),
                       ("/api/embed", {"model": name, "input": "hi"}),
                       ("/api/show", {"model": name})):
        status, raw = served.request("POST", path, body)
        answer = json.loads(raw)
        assert status == 404, path
        code = answer["error"]["code"] if path.startswith("/v1") else answer["code"]  # Ollama's error is text
        assert code == "model_not_found", path
    with pytest.raises(ollama.ResponseError) as err:
        served.ollama.chat(model=name, messages=CHAT)
    assert err.value.status_code == 404
    assert (f'model "{name}" not found, try pulling it first' == err.value.error) is not catalog
    assert not (served.store.root / "downloads").exists()


def test_ollama_requires_a_model_and_openai_uses_the_default(tmp_path):
    s = Served(tmp_path, max_loaded=1, keep_alive=None)
    try:
        status, raw = s.request("POST", "/api/chat", {"messages": CHAT})
        assert status == 400 and json.loads(raw)["error"] == "model is required"
        status, raw = s.request("POST", "/v1/chat/completions", {"messages": CHAT})  # nothing used yet
        assert status == 400 and json.loads(raw)["error"]["param"] == "model"
        s.openai.chat.completions.create(model="scripted", messages=CHAT, max_tokens=2)
        status, raw = s.request("POST", "/v1/chat/completions", {"messages": CHAT, "temperature": 0})
        assert status == 200 and json.loads(raw)["model"] == "scripted"  # the one used last
    finally:
        s.close()


# ---------------------------------------------------------------- keep-alive, expiry, eviction
def test_keep_alive_zero_unloads_after_the_request_as_ollama_does(tmp_path):
    s = Served(tmp_path, max_loaded=2, keep_alive=None)
    try:
        s.ollama.chat(model="scripted", messages=CHAT)
        s.ollama.chat(model="tiny", messages=CHAT, options={"num_predict": 4})
        assert [m.model for m in s.ollama.ps().models] == ["scripted:latest", "tiny:latest"]
        assert all(m.expires_at.year == 9999 for m in s.ollama.ps().models)  # keep_alive forever
        s.ollama.chat(model="tiny", messages=CHAT, options={"num_predict": 4}, keep_alive=0)
        s.wait_loaded(["scripted"])
        # docs/api.md "Unload a model": no messages and keep_alive 0
        reply = s.ollama.chat(model="scripted", messages=[], keep_alive=0)
        assert reply.done_reason == "unload" and s.ollama.ps().models == []
        reply = s.ollama.generate(model="tiny", prompt="")  # an empty prompt loads it
        assert reply.done_reason == "load" and [m.model for m in s.ollama.ps().models] == ["tiny:latest"]
        # a request's keep_alive 0: it expired at once; an unload request: unloaded for its keep_alive
        assert s.unloads()[:2] == [("tiny", "expired"), ("scripted", "keep_alive")]
    finally:
        s.close()


def test_a_duration_keep_alive_sets_the_expiry_and_the_model_unloads_when_idle(tmp_path):
    s = Served(tmp_path, max_loaded=2, keep_alive=None)
    try:
        s.ollama.generate(model="tiny", prompt="hi", options={"num_predict": 2}, keep_alive="1h")
        expires = s.ollama.ps().models[0].expires_at.timestamp()
        assert 3590 < expires - time.time() <= 3600
        s.ollama.generate(model="tiny", prompt="hi", options={"num_predict": 2}, keep_alive="300ms")
        s.wait_loaded([])
        s.wait_unloads([("tiny", "expired")])
        status, raw = s.request("POST", "/api/generate", {"model": "tiny", "prompt": "hi", "keep_alive": "300"})
        answer = json.loads(raw)  # Go refuses a duration without its unit
        assert status == 400 and answer["code"] == "invalid_argument" and "keep_alive" in answer["error"]
    finally:
        s.close()


def test_the_server_default_keep_alive_expires_idle_models(tmp_path):
    s = Served(tmp_path, max_loaded=3, keep_alive=0.3)
    try:
        s.openai.chat.completions.create(model="scripted", messages=CHAT, max_tokens=2)
        s.openai.embeddings.create(model="embed", input="hi")
        s.wait_loaded([])
        s.wait_unloads([("embed", "expired"), ("scripted", "expired")])
    finally:
        s.close()


def test_max_loaded_one_evicts_the_least_recently_used_and_requests_interleave(tmp_path):
    s = Served(tmp_path, max_loaded=1, keep_alive=None)
    try:
        assert s.openai.chat.completions.create(model="scripted", messages=CHAT).choices[0].message.content \
            == SCRIPTED_TEXT
        s.openai.chat.completions.create(model="tiny", messages=CHAT, max_tokens=4)
        assert s.loaded() == ["tiny"] and s.unloads() == [("scripted", "evicted")]

        def ask(i: int) -> str:  # callers at once, alternating models: the queue orders them, each is answered
            name = ("scripted", "tiny")[i % 2]
            return name + ":" + s.openai.chat.completions.create(model=name, messages=CHAT, max_tokens=8,
                                                                 temperature=0).choices[0].message.content

        with ThreadPoolExecutor(4) as threads:
            answers = list(threads.map(ask, range(6)))
        assert all(SCRIPTED_TEXT.startswith(a.removeprefix("scripted:")) == a.startswith("scripted:")
                   for a in answers)
        health = json.loads(s.request("GET", "/health")[1])
        assert health["models"]["max_loaded"] == 1 and len(health["models"]["loaded"]) == 1
    finally:
        s.close()


def test_a_leased_model_is_never_unloaded_under_its_generation(tmp_path):
    s = Served(tmp_path, max_loaded=1, keep_alive=0)
    try:
        conn = http.client.HTTPConnection(s.host, s.port, timeout=60)
        conn.request("POST", "/v1/chat/completions", json.dumps(
            {"model": "tiny", "messages": CHAT, "max_tokens": 400, "ignore_eos": True, "stream": True}),
            {"Content-Type": "application/json"})
        response = conn.getresponse()
        response.read(64)  # it generates
        waiting = ThreadPoolExecutor(1).submit(  # another model: waits for the turn, then for the room
            lambda: s.openai.chat.completions.create(model="scripted", messages=CHAT).choices[0].message.content)
        time.sleep(0.3)
        assert s.loaded() == ["tiny"] and s.unloads() == []
        rest = response.read()  # the stream runs to its end, unharmed
        conn.close()
        assert sse_events(rest)[-1] == "[DONE]"
        assert waiting.result(60) == SCRIPTED_TEXT
        # its keep-alive 0 expired it when its lease ended, or the waiting load evicted it: only then
        assert s.unloads() and s.unloads()[0][0] == "tiny" and s.unloads()[0][1] in ("evicted", "expired")
    finally:
        s.close()


def test_the_tokenizer_routes_load_a_model_only_in_the_generation_turn(tmp_path):
    """#42: /tokenize, /detokenize and /apply-template leased their model outside the queue's turn,
    so they loaded (and could evict) models while another generated. A model they must load now
    waits for the turn: it starts loading only after the running generation ended."""
    s = Served(tmp_path, max_loaded=2, keep_alive=None)
    try:
        conn = http.client.HTTPConnection(s.host, s.port, timeout=60)
        conn.request("POST", "/v1/chat/completions", json.dumps(
            {"model": "tiny", "messages": CHAT, "max_tokens": 300, "ignore_eos": True, "stream": True}),
            {"Content-Type": "application/json"})
        response = conn.getresponse()
        response.read(64)  # it generates
        routes = [("/tokenize", {"model": "scripted", "content": "hello"}),
                  ("/apply-template", {"model": "scripted", "messages": CHAT})]
        waiting = ThreadPoolExecutor(2).map(lambda route: s.request("POST", *route), routes)
        rest = response.read()
        conn.close()
        assert sse_events(rest)[-1] == "[DONE]"
        assert [status for status, _ in waiting] == [200, 200]
        kinds = [(e.kind, e.state, e.data.get("model_id")) for e in s.events]
        ended = next(i for i, k in enumerate(kinds) if k[0] == "generation" and k[1] != "running" and k[2] == "tiny")
        loading = kinds.index(("model", "loading", "scripted"))
        assert loading > ended, kinds
        assert s.request("POST", "/detokenize", {"model": "scripted", "tokens": [1, 2]})[0] == 200  # loaded: at once
    finally:
        s.close()


def test_a_model_that_fails_to_load_is_that_requests_error_and_the_others_serve(tmp_path):
    s = Served(tmp_path, max_loaded=2, keep_alive=None)
    try:
        broken = s.store.path("tiny") / "llm.mnn.weight"
        good = broken.read_bytes()
        broken.write_bytes(good[: len(good) // 2])  # truncated weights
        with pytest.raises(openai.UnprocessableEntityError) as err:
            s.openai.chat.completions.create(model="tiny", messages=CHAT, max_tokens=2)
        assert err.value.code == "invalid_model"
        assert s.openai.chat.completions.create(model="scripted", messages=CHAT).choices[0].message.content \
            == SCRIPTED_TEXT
        health = json.loads(s.request("GET", "/health")[1])
        assert health["status"] == "ok" and health["last_error"]["code"] == "invalid_model"
        broken.write_bytes(good)  # repaired: it loads on the next request
        s.openai.chat.completions.create(model="tiny", messages=CHAT, max_tokens=2)
        assert s.loaded() == ["scripted", "tiny"]
    finally:
        s.close()


def test_the_prompt_cache_survives_switching_when_both_fit_and_is_dropped_when_evicted(tmp_path):
    long_chat = [{"role": "user", "content": "Tell me about " + "the sea, " * 60}]

    def cached(s: Served, name: str) -> int:
        usage = s.openai.chat.completions.create(model=name, messages=long_chat, max_tokens=2, temperature=0).usage
        return usage.prompt_tokens_details.cached_tokens

    both = Served(tmp_path / "both", max_loaded=2, keep_alive=None)
    try:
        assert cached(both, "tiny") == 0
        cached(both, "scripted")
        assert cached(both, "tiny") > 100  # its KV cache was kept while the other model answered
    finally:
        both.close()
    one = Served(tmp_path / "one", max_loaded=1, keep_alive=None)
    try:
        cached(one, "tiny")
        cached(one, "scripted")
        assert cached(one, "tiny") == 0  # unloaded for the other: its cache went with it, and nothing stale came back
    finally:
        one.close()


def test_per_model_options_apply_when_it_loads_on_demand(tmp_path):
    s = Served(tmp_path, max_loaded=1, keep_alive=None)
    try:
        s.store.save_model_options("tiny", {"context_length": 512})
        assert s.openai.models.retrieve("tiny").model_extra["context_length"] == 512  # what it will load with
        s.openai.chat.completions.create(model="tiny", messages=CHAT, max_tokens=2)
        health = json.loads(s.request("GET", "/health")[1])
        assert health["model"]["context_length"] == 512 and health["model"]["options"]["threads"] == 1
        assert s.ollama.ps().models[0].context_length == 512
    finally:
        s.close()


def test_rss_comes_back_after_an_unload(tmp_path):
    # smollm2-135m: big enough (84 MB of weights, mapped) for its load to show in the process's memory
    store = ModelStore(tmp_path)
    store.import_model(test_model_dir("smollm2-135m"), model_id="smollm")
    pool = ModelPool(store, defaults={"threads": 1}, max_loaded=1, keep_alive=None)
    try:
        before = rss_bytes()
        lease = pool.acquire("smollm")
        lease.engine.chat(CHAT, max_tokens=8)
        loaded = rss_bytes()
        lease.release()
        pool.unload("smollm")
        after = rss_bytes()
        grown = loaded - before
        assert grown > 20 * 2**20, grown
        # within a quarter of what the load added (Python's and MNN's allocator keep some; stated in the docs)
        assert after - before < grown / 4, (before, loaded, after)
    finally:
        pool.close()


# ---------------------------------------------------------------- the command line
@pytest.mark.slow
def test_sigterm_during_a_load_exits_cleanly(tmp_path):
    home = tmp_path / "home"
    store = ModelStore(home)
    store.import_model(test_model_dir("smollm2-135m"), model_id="smollm")
    port = free_port()
    env = dict(os.environ, MNN_ENGINE_HOME=str(home))
    proc = subprocess.Popen([sys.executable, "-m", "mnn_engine", "serve", "--port", str(port), "--threads", "1"],
                            env=env, stderr=subprocess.PIPE, text=True, cwd="/")
    try:
        while "mnn-engine: serving" not in (line := proc.stderr.readline()):
            assert line or proc.poll() is None
        asking = threading.Thread(target=lambda: _post(port, {"model": "smollm", "messages": CHAT}), daemon=True)
        asking.start()
        deadline = time.monotonic() + 30
        while not _health(port)["models"]["loading"]:  # its first load: the first-touch child, the mmap cache
            assert time.monotonic() < deadline, "the load never showed on /health"
            time.sleep(0.005)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
        rest = proc.stderr.read()
        assert "Traceback" not in rest and "server stopped" in rest
    finally:
        if proc.poll() is None:
            proc.kill()


def _post(port: int, body: dict) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        conn.request("POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
        conn.getresponse().read()
    except OSError:
        pass  # the server stopped under it
    finally:
        conn.close()


def _health(port: int) -> dict:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", "/health")
        return json.loads(conn.getresponse().read())
    finally:
        conn.close()


def test_chat_and_generate_can_use_a_running_server(tmp_path):
    s = Served(tmp_path, max_loaded=1, keep_alive=None)
    try:
        env = dict(os.environ, MNN_ENGINE_HOME=str(tmp_path / "elsewhere"))  # nothing loads in that process
        out = subprocess.run([sys.executable, "-m", "mnn_engine", "generate", "--url", s.url, "scripted", "Hi",
                              "--stats"], env=env, capture_output=True, text=True, timeout=60, cwd="/")
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == SCRIPTED_TEXT
        assert json.loads(out.stderr.strip().splitlines()[-1])["completion_tokens"] > 5
        chat = subprocess.run([sys.executable, "-m", "mnn_engine", "chat", "--url", s.url, "scripted"],
                              input="Hi\n/stats\n", env=env, capture_output=True, text=True, timeout=60, cwd="/")
        assert chat.returncode == 0, chat.stderr
        assert SCRIPTED_TEXT in chat.stdout
        assert f"connected to {s.url}: scripted (context 2048 tokens)" in chat.stderr
        assert "tokens," in chat.stderr  # /stats
        wrong = subprocess.run([sys.executable, "-m", "mnn_engine", "chat", "--url", s.url, "nope"],
                               input="", env=env, capture_output=True, text=True, timeout=60, cwd="/")
        assert wrong.returncode != 0 and "serves no model 'nope'" in wrong.stderr
        assert not (tmp_path / "elsewhere" / "models").exists()
    finally:
        s.close()


def test_models_config_stores_options_with_the_model(tmp_path):
    env = dict(os.environ, MNN_ENGINE_HOME=str(tmp_path))
    ModelStore(tmp_path).import_model(test_model_dir("tiny"), model_id="tiny")

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "mnn_engine", "models", "config", *args], env=env,
                              capture_output=True, text=True, timeout=60, cwd="/")

    out = run("tiny", "--threads", "2", "--context-length", "1024", "--json")
    assert out.returncode == 0, out.stderr
    shown = json.loads(out.stdout)
    assert shown["options"] == {"threads": 2, "context_length": 1024} and shown["effective"]["threads"] == 2
    assert run("tiny", "--threads", "99").returncode == 2  # refused now, not at the next load
    assert json.loads(run("tiny", "--json").stdout)["options"] == {"threads": 2, "context_length": 1024}
    ModelStore(tmp_path).rename("tiny", "small")  # the options follow the model
    assert json.loads(run("small", "--json").stdout)["options"]["threads"] == 2
    assert json.loads(run("small", "--reset", "--json").stdout)["options"] == {}
    assert not (tmp_path / "options" / "small.json").exists()  # no options of its own: no file
