"""The engine: load options, backends, runtime rules, events, logs, races."""

from __future__ import annotations

import asyncio
import ctypes
import random
import threading
import time

import pytest
from support import SCRIPTED_TEXT, cancelling, test_model_dir

from mnn_engine import Engine, LoadOptions, MnnEngineError, ModelStore, backend_capabilities, build_info
from mnn_engine.runtime.native_output import captured_native_output
from mnn_engine.runtime.prompt import chat_messages

CHAT = [{"role": "user", "content": "hello there"}]


@pytest.fixture
def engine(tmp_path):
    store = ModelStore(tmp_path / "store")
    store.import_model(test_model_dir("tiny-scripted"), model_id="scripted")
    store.import_model(test_model_dir("tiny"), model_id="tiny")
    eng = Engine(store)
    yield eng
    eng.close()


def _codes(action) -> str:
    with pytest.raises(MnnEngineError) as err:
        action()
    return err.value.code


# ---------------------------------------------------------------- options and backends
@pytest.mark.parametrize("options", [
    {"threads": 0}, {"threads": 9}, {"threads": True}, {"threads": 2.5},
    {"backend": "cuda"}, {"precision": "medium"}, {"use_mmap": "yes"}, {"prompt_cache": 1}, {"dynamic_option": 9},
    {"quant_qkv": 3}, {"quant_qkv": 4}, {"quant_qkv": True}, {"quant_qkv": -1},
])
def test_load_options_are_validated(options):
    assert _codes(lambda: LoadOptions(**options).validate()) == "invalid_argument"


def test_load_options_translate_to_mnn_keys(tmp_path):
    config = LoadOptions(threads=2, precision="high", use_mmap=True).mnn_config(tmp_path)
    assert config == {"backend_type": "cpu", "thread_num": 2, "precision": "high", "use_mmap": True,
                      "tmp_path": str(tmp_path)}
    tuned = LoadOptions(dynamic_option=8, quant_qkv=1).mnn_config(tmp_path)
    assert tuned["dynamic_option"] == 8 and tuned["quant_qkv"] == 1


def test_compiled_backends_are_what_the_build_recorded():
    caps = backend_capabilities()
    compiled = build_info()["backends_compiled"]
    assert caps["cpu"] == {"compiled": True, "available": True}
    for name in ("opencl", "vulkan", "hexagon"):
        assert caps[name]["compiled"] == (name in compiled)
        if not caps[name]["compiled"]:
            assert caps[name]["available"] is False
    if build_info()["mode"] == "wheel":
        assert compiled == ["cpu"]  # the PyPI wheel's engine is CPU-only


def test_unavailable_backend_is_an_error_not_a_fallback(engine):
    assert _codes(lambda: engine.load("scripted", backend="opencl")) == "backend_unavailable"
    assert engine.snapshot()["model"]["state"] == "unloaded"


def test_loaded_model_records_its_options(engine):
    model = engine.load("scripted", threads=2, precision="high")
    assert model["id"] == "scripted" and model["state"] == "loaded"
    assert model["options"] == {"backend": "cpu", "use_mmap": True, "precision": "high", "threads": 2,
                                "dynamic_option": None, "quant_qkv": None, "context_length": None,
                                "prompt_cache": True, "memory": None, "speculative": "auto", "draft_tokens": 7}
    assert engine.snapshot()["engine"] == "ready"
    assert engine.store.cache_path("scripted").is_dir()  # MNN's tmp_path lives in the store


def test_prompt_cache_load_option(engine):
    from mnn_engine import _mnn

    engine.load("scripted", threads=1)  # on by default
    start = [{"role": "system", "content": "You answer questions. " * 30}, *CHAT]
    chat = [*start, {"role": "assistant", "content": SCRIPTED_TEXT}, {"role": "user", "content": "again"}]
    first = engine.chat(start, temperature=0)
    second = engine.chat(chat, temperature=0)
    held = len(engine.llm.prompt_ids(start))
    if engine.llm.batch_exact:  # all the prompt was kept, and the answer's tokens the template repeats
        assert first.cached_tokens == 0 and second.cached_tokens > held
    else:  # whole prefill chunks
        assert first.cached_tokens == 0 and second.cached_tokens == held // _mnn.prefill_chunk() * _mnn.prefill_chunk()
    # the prompt, and with exact reuse the answer's tokens whose KV was computed
    answer = len(second.token_ids) if engine.llm.batch_exact else 0
    assert engine.snapshot()["model"]["prompt_cache_tokens"] in (second.prompt_tokens + answer,
                                                                 second.prompt_tokens + max(answer - 1, 0))
    engine.load("scripted", threads=1, prompt_cache=False)
    engine.chat(start, temperature=0)
    assert engine.chat(chat, temperature=0).cached_tokens == 0


@pytest.mark.parametrize("quant_qkv", [0, 1, 2])
def test_kv_cache_quantisation_keeps_the_scripted_reply(engine, quant_qkv):
    engine.load("scripted", threads=1, quant_qkv=quant_qkv, dynamic_option=8)
    assert engine.snapshot()["model"]["options"]["quant_qkv"] == quant_qkv
    assert engine.chat(CHAT, temperature=0).text == SCRIPTED_TEXT


def test_load_by_path_and_replace(engine):
    engine.load(str(test_model_dir("tiny")), threads=1)
    assert engine.snapshot()["model"]["id"] is None
    engine.load("scripted", threads=1)
    assert engine.active_model_id == "scripted"
    assert engine.chat(CHAT, temperature=0).text == SCRIPTED_TEXT


def test_mmap_load_uses_the_store_cache(engine):
    engine.load("tiny", threads=1, use_mmap=False)
    engine.unload()
    # no weights cached (they are 12 MB): only the model stamp and the load checks (their size varies with
    # the CPU: 1,033 bytes on one machine)
    assert engine.store.cache_info("tiny")["tiny"] < 64 * 1024
    engine.load("tiny", threads=1, use_mmap=True)
    assert engine.chat(CHAT, max_tokens=3).completion_tokens == 3
    engine.unload()
    weights = engine.store.cache_info("tiny")["tiny"]
    assert weights > 1_000_000  # MNN's prepared weights
    assert engine.store.clear_cache("tiny") == weights
    engine.load("tiny", threads=1, use_mmap=True)  # rebuilds it
    assert engine.chat(CHAT, max_tokens=3).completion_tokens == 3


# ---------------------------------------------------------------- runtime rules
def test_rules_without_a_model(engine):
    assert _codes(lambda: engine.chat(CHAT)) == "model_not_loaded"
    assert _codes(engine.require_model_for_server) == "model_not_loaded"
    engine.unload()  # nothing loaded: a no-op


def test_server_rules(engine):
    engine.load("scripted", threads=1)
    engine.set_server_state("running", "http://127.0.0.1:1")  # what the server does when it starts
    assert _codes(engine.require_model_for_server) == "server_running"
    assert _codes(engine.unload) == "server_running"
    assert _codes(lambda: engine.load("tiny")) == "server_running"
    assert _codes(lambda: engine.store.delete("scripted")) == "model_in_use"
    engine.set_server_state("stopped")
    engine.unload()
    engine.store.delete("scripted")


def test_store_refuses_changes_to_the_loaded_model(engine):
    engine.load("scripted", threads=1)
    assert _codes(lambda: engine.store.rename("scripted", "other")) == "model_in_use"
    assert _codes(lambda: engine.store.delete("scripted")) == "model_in_use"
    assert _codes(lambda: engine.store.clear_cache("scripted")) == "model_in_use"
    assert _codes(lambda: engine.store.import_model(test_model_dir("tiny"), model_id="scripted",
                                                    replace=True)) == "model_in_use"
    engine.store.rename("tiny", "tiny-2")  # other models are free


def test_one_generation_at_a_time(engine):
    engine.load("tiny", threads=1)
    started, release = threading.Event(), threading.Event()

    def hold(_piece: str) -> None:
        started.set()
        release.wait(10)

    worker = threading.Thread(target=lambda: engine.generate(CHAT, callback=hold, max_tokens=2, ignore_eos=True))
    worker.start()
    started.wait(10)
    assert engine.snapshot()["generation"]["state"] == "running"
    assert engine.snapshot()["engine"] == "generating"
    assert _codes(lambda: engine.chat(CHAT)) == "busy"
    release.set()
    worker.join()
    assert engine.snapshot()["generation"]["state"] == "idle"


@pytest.mark.parametrize("failure", [OSError(28, "No space left on device"), KeyboardInterrupt()])
def test_a_load_that_fails_otherwise_gives_the_model_back(engine, monkeypatch, failure):
    """Not only an MnnEngineError: an OSError while the mmap cache is
    prepared, or Ctrl-C during the load, leaves the engine unloaded and the
    model's cross-process lock released (other processes may delete it)."""
    def fail(*_args):
        raise failure

    monkeypatch.setattr(engine.store, "prepared_cache", fail)
    with pytest.raises(type(failure)):
        engine.load("scripted", threads=1)
    snap = engine.snapshot()
    assert snap["model"]["state"] == "unloaded" and snap["model"]["id"] is None
    assert snap["last_error"]["code"] == "internal_error"
    assert not engine.store.in_use("scripted")
    with engine.store.changing("scripted", "rename"):  # the exclusive lock another process would take
        pass
    monkeypatch.undo()
    engine.load("scripted", threads=1)  # and it loads again
    assert engine.snapshot()["model"]["state"] == "loaded"


def test_generation_failure_unloads_the_model(engine):
    engine.load("scripted", threads=1)
    events = []
    engine.events.subscribe(events.append)
    engine.llm._inject_failure(3)
    assert _codes(lambda: engine.chat(CHAT, temperature=0)) == "generation_failed"
    snap = engine.snapshot()
    assert snap["model"]["state"] == "unloaded" and snap["model"]["id"] is None
    assert snap["last_error"]["code"] == "generation_failed"
    assert [(e.kind, e.state) for e in events] == [
        ("generation", "running"), ("generation", "failed"), ("model", "unloading"), ("model", "unloaded")]
    assert events[-1].data["reason"] == "generation_failed"
    engine.load("scripted", threads=1)  # recovery
    assert engine.chat(CHAT, temperature=0).text == SCRIPTED_TEXT


def test_finish_length_and_cancel_keep_the_model(engine):
    engine.load("tiny", threads=1)
    assert engine.chat(CHAT, max_tokens=2).finish_reason == "length"
    with cancelling(engine.cancel_generation):
        result = engine.chat(CHAT, max_tokens=100000, ignore_eos=True, temperature=0)
    assert result.finish_reason == "cancelled"
    assert engine.snapshot()["model"]["state"] == "loaded"


def test_stop_then_send_waits_for_the_cancelled_generation_not_busy(engine):
    """A cancel, then a new request at once (the chat widget's Stop, then
    Send): the request waits the one token the cancelled run needs to stop.
    A run that was not cancelled is still refused ``busy`` at once."""
    engine.load("tiny", threads=1)
    started = threading.Event()
    first = engine.submit(chat_messages(CHAT), lambda _p: started.set(), max_tokens=100000, ignore_eos=True)
    assert started.wait(30)
    with pytest.raises(MnnEngineError) as err:
        engine.chat(CHAT, max_tokens=2)
    assert err.value.code == "busy"
    engine.cancel_generation()
    assert engine.chat(CHAT, max_tokens=2).finish_reason == "length"  # not busy
    assert first.result().finish_reason == "cancelled"


def test_event_order_load_generate_cancel_unload(engine):
    events = []
    engine.events.subscribe(events.append)
    engine.load("tiny", threads=1)

    def cancel_after_first(_piece: str) -> None:
        engine.cancel_generation()

    engine.generate(CHAT, callback=cancel_after_first, max_tokens=50, ignore_eos=True)
    engine.unload()
    assert [(e.kind, e.state) for e in events] == [
        ("model", "loading"), ("model", "loaded"),
        ("generation", "running"), ("generation", "cancelled"),
        ("model", "unloading"), ("model", "unloaded"),
    ]
    assert [e.seq for e in events] == sorted(e.seq for e in events)
    assert all(e.data.get("model_id") == "tiny" for e in events)


def test_events_reach_async_consumers(engine):
    async def main():
        received = []

        async def consume():
            async for event in engine.events.stream():
                received.append((event.kind, event.state))
                if event.state == "loaded":
                    return

        task = asyncio.create_task(consume())
        await asyncio.sleep(0)
        await asyncio.to_thread(engine.load, "scripted", threads=1)
        await asyncio.wait_for(task, 30)
        return received

    assert asyncio.run(main()) == [("model", "loading"), ("model", "loaded")]


def test_stream_chat_and_astream_chat(engine):
    engine.load("scripted", threads=1)
    assert "".join(engine.stream_chat(CHAT, temperature=0)) == SCRIPTED_TEXT

    async def collect():
        return [p async for p in engine.astream_chat(CHAT, temperature=0)]

    assert "".join(asyncio.run(collect())) == SCRIPTED_TEXT
    assert engine.last_result.finish_reason == "stop"


# ---------------------------------------------------------------- logs
def test_logs_capture_mnn_output_and_never_the_text(engine):
    seen = []
    engine.logs.subscribe(seen.append)
    engine.load("scripted", threads=1)
    secret = "zebra-violin-4711"
    engine.chat([{"role": "user", "content": secret}], temperature=0)
    # MNN prints with printf to fd 1 (its CPU line comes once per process, so
    # a native print is made here the same way)
    with captured_native_output():
        ctypes.CDLL(None).printf(b"native line from C\n")
    entries = engine.logs.entries()
    assert any(e.tag == "mnn_engine.mnn" and e.message == "native line from C" for e in entries)
    assert any(e.tag == "mnn_engine.engine" and "loaded" in e.message for e in entries)
    assert seen and seen[-1] == entries[-1]
    for entry in entries:
        if entry.level in ("INFO", "WARNING", "ERROR", "CRITICAL"):
            assert secret not in entry.message and "tiny MNN test model" not in entry.message


def test_log_buffer_is_a_ring(tmp_path):
    eng = Engine(ModelStore(tmp_path), log_capacity=5)
    try:
        import logging

        for i in range(20):
            logging.getLogger("mnn_engine.test").info("line %d", i)
        assert [e.message for e in eng.logs.entries()] == [f"line {i}" for i in range(15, 20)]
    finally:
        eng.close()


# ---------------------------------------------------------------- races
def test_racing_load_unload_generate_stays_consistent(engine):
    errors: list[BaseException] = []
    stop = time.monotonic() + 6
    expected = {"busy", "model_not_loaded", "generation_failed"}

    def worker(seed: int) -> None:
        rng = random.Random(seed)
        while time.monotonic() < stop:
            action = rng.choice(["load", "unload", "chat", "stream", "cancel", "snapshot"])
            try:
                if action == "load":
                    engine.load(rng.choice(["scripted", "tiny"]), threads=1)
                elif action == "unload":
                    engine.unload()
                elif action == "chat":
                    engine.chat(CHAT, max_tokens=rng.randint(1, 20), ignore_eos=True)
                elif action == "stream":
                    for _ in engine.stream_chat(CHAT, max_tokens=rng.randint(1, 20), ignore_eos=True):
                        pass
                elif action == "cancel":
                    engine.cancel_generation()
                else:
                    engine.snapshot()
            except MnnEngineError as exc:
                if exc.code not in expected:
                    errors.append(exc)
            except BaseException as exc:
                errors.append(exc)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors[:3]
    snap = engine.snapshot()
    assert snap["generation"]["state"] == "idle"
    if snap["model"]["state"] == "loaded":
        assert snap["model"]["id"] in {"scripted", "tiny"} and engine.llm.is_loaded
        assert engine.chat(CHAT, max_tokens=2, ignore_eos=True).completion_tokens == 2
    else:
        assert snap["model"] == {"state": "unloaded", "id": None, "path": None, "options": None}
