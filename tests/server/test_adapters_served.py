"""LoRA adapters served by name (issue 46): a store holding tiny-scripted
(says SCRIPTED_TEXT) with its scripted adapter (says ADAPTER_TEXT) and a
random one, served by a ModelPool on loopback. Each request names ``scripted``,
``scripted_says`` or ``scripted_random`` in a dialect, and the answer shows
which weights made it; the base loads once (its load events are counted)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time

import pytest
from server import test_many_models
from server.test_many_models import Served
from support import SCRIPTED_TEXT, test_model_dir

from mnn_engine import MnnEngineError, ModelStore

ADAPTER_TEXT = "Hello! I am a test model."  # tools/models/build_test_models.py: tiny-scripted-lora's script
CHAT = [{"role": "user", "content": "Who are you?"}]


def _store(root, *, tiny: bool = False, adapter: str | None = "says") -> ModelStore:
    """tiny-scripted as ``scripted`` with its scripted adapter as ``adapter`` (and tiny as ``tiny``)."""
    store = ModelStore(root)
    store.import_model(test_model_dir("tiny-scripted"), model_id="scripted")
    if tiny:
        store.import_model(test_model_dir("tiny"), model_id="tiny")
    if adapter is not None:
        store.import_adapter(test_model_dir("tiny-scripted-lora"), "scripted", name=adapter)
    return store


@pytest.fixture
def served(tmp_path, monkeypatch):
    store = _store(tmp_path)
    monkeypatch.setattr(test_many_models, "_store", lambda root: store)  # the served store: this one
    server = Served(tmp_path, keep_alive=None)
    yield server
    server.pool.close()


def _loads(served, name: str) -> int:
    return sum(1 for e in served.events if e.kind == "model" and e.state == "loaded" and e.data.get("model_id") == name)


def test_alternating_requests_answer_from_their_own_weights_and_the_base_loads_once(served):
    for _ in range(2):
        for model, text in (("scripted", SCRIPTED_TEXT), ("scripted_says", ADAPTER_TEXT)):
            answer = served.openai.chat.completions.create(model=model, messages=CHAT, temperature=0)
            assert answer.choices[0].message.content == text and answer.model == model
            chunks = served.openai.chat.completions.create(model=model, messages=CHAT, temperature=0, stream=True)
            assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == text
            reply = served.ollama.chat(model=model, messages=CHAT, options={"temperature": 0})
            assert reply.message.content == text
            streamed = served.ollama.generate(model=model, prompt="Who are you?", stream=True,
                                              options={"temperature": 0})
            assert "".join(part.response for part in streamed) == text
            status, raw = served.request("POST", "/v1/messages", {"model": model, "max_tokens": 64,
                                                                  "messages": CHAT, "temperature": 0})
            assert status == 200 and json.loads(raw)["content"][0]["text"] == text
            status, raw = served.request("POST", "/v1/responses", {"model": model, "input": "Who are you?",
                                                                   "temperature": 0})
            assert status == 200 and json.loads(raw)["output"][-1]["content"][0]["text"] == text
    assert _loads(served, "scripted") == 1 and _loads(served, "scripted_says") == 1


def test_adapters_are_listed_with_their_base(served):
    ids = [m.id for m in served.openai.models.list()]
    assert "scripted_says" in ids and "scripted" in ids
    tags = json.loads(served.request("GET", "/api/tags")[1])["models"]
    assert "scripted_says:latest" in [t["name"] for t in tags]
    status, raw = served.request("POST", "/api/show", {"model": "scripted_says"})
    assert status == 200 and json.loads(raw)["details"]["family"] == "qwen3"


def test_keep_alive_zero_on_an_adapter_unloads_it_and_not_the_base(served):
    served.ollama.chat(model="scripted_says", messages=CHAT, options={"temperature": 0})
    served.wait_loaded(["scripted", "scripted_says"])
    served.ollama.chat(model="scripted_says", messages=CHAT, keep_alive=0, options={"temperature": 0})
    served.wait_loaded(["scripted"])
    assert served.ollama.chat(model="scripted", messages=CHAT).message.content == SCRIPTED_TEXT
    assert _loads(served, "scripted") == 1


def test_unloading_the_base_unloads_its_adapter_first(served):
    served.ollama.chat(model="scripted_says", messages=CHAT, options={"temperature": 0})
    served.ollama.generate(model="scripted", keep_alive=0)  # Ollama's unload: its adapter goes too
    served.wait_loaded([])
    unloaded = [e.data.get("model_id") for e in served.events if e.kind == "model" and e.state == "unloaded"]
    assert unloaded[-2:] == ["scripted_says", "scripted"]


def test_a_broken_adapter_is_that_requests_error_and_the_base_keeps_serving(served):
    lora = served.store.adapter_path("scripted", "says") / "lora.mnn"
    lora.write_bytes(lora.read_bytes()[:4000])
    status, raw = served.request("POST", "/v1/chat/completions", {"model": "scripted_says", "messages": CHAT})
    assert status == 422 and "adapter" in json.loads(raw)["error"]["message"]
    assert served.openai.chat.completions.create(model="scripted", messages=CHAT).choices[0].message.content \
        == SCRIPTED_TEXT


def test_store_rules_for_adapters(tmp_path):
    store = ModelStore(tmp_path)
    store.import_model(test_model_dir("tiny-scripted"), model_id="scripted")
    store.import_model(test_model_dir("tiny"), model_id="tiny")
    with pytest.raises(MnnEngineError) as err:  # exported over tiny-scripted, whose weights tiny's are not
        store.import_adapter(test_model_dir("tiny-scripted-lora"), "tiny")
    assert err.value.code == "invalid_model"
    info = store.import_adapter(test_model_dir("tiny-scripted-lora"), "scripted")
    assert info.id == "scripted_tiny-scripted-lora" and info.rank and info.scale == 1.0
    with pytest.raises(MnnEngineError) as err:
        store.import_adapter(test_model_dir("tiny-scripted-lora"), "scripted")
    assert err.value.code == "model_exists"
    for bad in ("../x", "a/b", "..", "x" * 200):
        with pytest.raises(MnnEngineError):
            store.import_adapter(test_model_dir("tiny-scripted-lora"), "scripted", name=bad)
    with pytest.raises(MnnEngineError) as err:
        store.delete("scripted")
    assert err.value.code == "invalid_argument" and "--force" in err.value.message
    renamed = store.rename_adapter("scripted", "tiny-scripted-lora", "says")
    assert [a.id for a in store.adapters()] == [renamed.id] == ["scripted_says"]
    store.rename("scripted", "base")
    assert [a.id for a in store.adapters()] == ["base_says"]
    store.delete("base", force=True)
    assert store.adapters() == [] and not store.exists("base")


def test_the_cli_imports_lists_and_deletes_adapters(tmp_path):
    env = {"MNN_ENGINE_HOME": str(tmp_path), "PATH": "/usr/bin:/bin"}
    run = lambda *args: subprocess.run([sys.executable, "-m", "mnn_engine", "models", *args], env=env,  # noqa: E731
                                       capture_output=True, text=True, timeout=120, cwd="/")  # the installed package
    assert run("import", str(test_model_dir("tiny-scripted")), "--id", "scripted").returncode == 0
    done = run("import-adapter", str(test_model_dir("tiny-scripted-lora")), "--base", "scripted", "--id", "says")
    assert done.returncode == 0 and "scripted_says" in done.stdout
    listing = run("list").stdout
    assert "scripted_says" in listing and "adapter of scripted" in listing
    scaled = run("config", "scripted_says", "--scale", "0.5")
    assert scaled.returncode == 0 and "scale 0.5" in scaled.stdout
    assert run("config", "scripted_says", "--threads", "2").returncode != 0  # a base's option, not an adapter's
    refused = run("rm", "scripted")
    assert refused.returncode != 0 and "--force" in refused.stderr
    assert run("rm", "scripted_says").returncode == 0
    assert run("rm", "scripted").returncode == 0


def test_an_adapter_directory_outside_the_store_is_copied_not_linked(tmp_path):
    source = tmp_path / "src"
    shutil.copytree(test_model_dir("tiny-scripted-lora"), source)
    store = ModelStore(tmp_path / "store")
    store.import_model(test_model_dir("tiny-scripted"), model_id="scripted")
    info = store.import_adapter(source, "scripted", name="says")
    shutil.rmtree(source)
    assert (store.adapter_path("scripted", "says") / "lora.mnn").is_file() and info.size_bytes > 0
    assert not (store.adapter_path("scripted", "says") / "lora.mnn").is_symlink()
    assert store.read_adapter("scripted", "says").parameters > 0  # still readable: nothing refers to the source


def test_lru_under_max_loaded_counts_an_adapter_with_its_base(tmp_path, monkeypatch):
    store = _store(tmp_path, tiny=True)
    monkeypatch.setattr(test_many_models, "_store", lambda root: store)
    served = Served(tmp_path, keep_alive=None, max_loaded=1)
    try:
        assert served.ollama.chat(model="scripted_says", messages=CHAT).message.content == ADAPTER_TEXT
        served.wait_loaded(["scripted", "scripted_says"])  # one model's weights: within max_loaded 1
        served.ollama.chat(model="tiny", messages=CHAT)  # another model: the adapter, then its base, go
        served.wait_loaded(["tiny"])
        unloaded = [e.data.get("model_id") for e in served.events if e.kind == "model" and e.state == "unloaded"]
        assert unloaded[-2:] == ["scripted_says", "scripted"]
        assert served.ollama.chat(model="scripted_says", messages=CHAT).message.content == ADAPTER_TEXT
        served.wait_loaded(["scripted", "scripted_says"])
    finally:
        served.pool.close()


def test_the_readme_adapter_lines_run_as_written(tmp_path):
    """The README's adapter commands, with the test models in the phone's names: import, list, the curl line
    against `serve` (the adapter's answer is its script), as a user types them."""
    import os
    import re
    import shlex
    import signal

    from live_server import free_port
    from support import REPO

    text = (REPO / "README.md").read_text()
    block = re.search(r"### LoRA adapters.*?```bash\n(.*?)```", text, re.S).group(1)
    lines = [line.split("#")[0].strip() for line in block.splitlines() if line.strip()]
    env = dict(os.environ, MNN_ENGINE_HOME=str(tmp_path))
    store = ModelStore(tmp_path)
    store.import_model(test_model_dir("tiny-scripted"), model_id="qwen3-0-6b")
    adapter = tmp_path / "qwen3-0.6b-tone"
    shutil.copytree(test_model_dir("tiny-scripted-lora"), adapter)
    port = free_port()
    server = None
    try:
        for line in lines:
            argv = shlex.split(line.replace("./qwen3-0.6b-tone", str(adapter)).replace("localhost:8081",
                                                                                      f"127.0.0.1:{port}"))
            if argv[:3] == ["python", "-m", "mnn_engine"]:
                argv = [sys.executable, *argv[1:]]
            if argv[-1] == "serve":
                server = subprocess.Popen([*argv, "--port", str(port), "--threads", "1"], env=env, cwd="/",
                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                deadline = time.monotonic() + 60
                while subprocess.run(["curl", "-sf", f"127.0.0.1:{port}/health"], capture_output=True).returncode:
                    assert time.monotonic() < deadline and server.poll() is None, "serve did not start"
                    time.sleep(0.1)
                continue
            done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120, cwd="/")
            assert done.returncode == 0, (line, done.stderr)
            if argv[0] == "curl":
                assert json.loads(done.stdout)["choices"][0]["message"]["content"] == ADAPTER_TEXT
            if argv[-1] == "list":
                assert "qwen3-0-6b_tone" in done.stdout and "adapter of qwen3-0-6b" in done.stdout
    finally:
        if server is not None:
            server.send_signal(signal.SIGTERM)
            assert server.wait(30) == 0


def test_a_base_is_not_unloaded_under_a_leased_adapter(tmp_path):
    from mnn_engine import ModelPool

    store = _store(tmp_path, tiny=True)
    pool = ModelPool(store, defaults={"threads": 1}, max_loaded=1, keep_alive=None)
    try:
        lease = pool.acquire("scripted_says")
        with pytest.raises(MnnEngineError) as err:  # tiny needs scripted's room: scripted's adapter is leased
            pool.acquire("tiny", timeout=0.3)
        assert err.value.code == "busy"
        pool.unload("scripted")  # asked while its adapter is leased: nothing goes under it
        assert sorted(name for name, _ in pool.loaded_engines()) == ["scripted", "scripted_says"]
        assert lease.engine.generate(CHAT, temperature=0).text == ADAPTER_TEXT
        lease.release()
        pool.acquire("tiny", timeout=30).release()
        assert [name for name, _ in pool.loaded_engines()] == ["tiny"]
    finally:
        pool.close()


def test_an_adapter_whose_base_is_gone_is_not_served(tmp_path):
    from mnn_engine import ModelPool

    store = _store(tmp_path)
    shutil.rmtree(store.path("scripted"))  # removed behind the store's back
    pool = ModelPool(store, defaults={"threads": 1})
    try:
        assert [m["name"] for m in pool.models()] == []
        with pytest.raises(MnnEngineError) as err:
            pool.acquire(pool.resolve("scripted_says"))
        assert err.value.code == "model_not_found"
    finally:
        pool.close()


def test_one_engine_serves_a_stored_adapter_over_its_base(tmp_path):
    from mnn_engine import Engine

    store = _store(tmp_path)
    with Engine(store) as engine:
        model = engine.load("scripted", adapter="says", threads=1)
        assert model["id"] == "scripted_says" and model["base"] == "scripted" and model["adapter"] == "says"
        assert engine.chat(CHAT, temperature=0).text == ADAPTER_TEXT
        with pytest.raises(MnnEngineError) as err:  # loaded: neither it nor its base can go
            store.delete_adapter("scripted", "says")
        assert err.value.code == "model_in_use"
        with pytest.raises(MnnEngineError):
            store.delete("scripted", force=True)
        engine.load("scripted", threads=1)  # the base alone again: the adapter is closed with its base
        assert engine.chat(CHAT, temperature=0).text == SCRIPTED_TEXT
    store.delete("scripted", force=True)


@pytest.mark.slow
def test_sigterm_while_an_adapter_is_made_exits_cleanly(tmp_path):
    """SIGTERM lands while the pool makes an adapter over its loaded base (tried until /health shows that
    load in progress: making the tiny adapter takes tens of milliseconds)."""
    import http.client
    import os
    import signal
    import threading

    from live_server import free_port
    from server.test_many_models import _health, _post

    home = tmp_path / "home"
    _store(home)
    port = free_port()
    env = dict(os.environ, MNN_ENGINE_HOME=str(home))
    proc = subprocess.Popen([sys.executable, "-m", "mnn_engine", "serve", "scripted", "--port", str(port),
                             "--threads", "1"], env=env, stderr=subprocess.PIPE, text=True, cwd="/")
    try:
        while "mnn-engine: serving" not in (line := proc.stderr.readline()):
            assert line or proc.poll() is None
        for _ in range(50):
            asking = threading.Thread(target=lambda: _post(port, {"model": "scripted_says", "messages": CHAT,
                                                                  "max_tokens": 1}), daemon=True)
            asking.start()
            deadline = time.monotonic() + 10
            while asking.is_alive() and time.monotonic() < deadline:
                loading = _health(port)["models"]["loading"]
                if loading and loading["model"] == "scripted_says":
                    proc.send_signal(signal.SIGTERM)
                    assert proc.wait(60) == 0
                    rest = proc.stderr.read()
                    assert "Traceback" not in rest and "server stopped" in rest
                    return
            asking.join(30)
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)  # Ollama's unload: made again next
            conn.request("POST", "/api/generate", json.dumps({"model": "scripted_says", "keep_alive": 0}))
            conn.getresponse().read()
            conn.close()
        pytest.fail("never saw the adapter's creation in progress on /health")
    finally:
        if proc.poll() is None:
            proc.kill()
