"""The model pool's rules on real engines (generated models): how many fit,
the memory budget, leases that hold a model, and Ollama's keep_alive."""

from __future__ import annotations

import math
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st
from support import SCRIPTED_TEXT, test_model_dir

from mnn_engine import MnnEngineError, ModelPool
from mnn_engine.api.ollama import keep_alive_field
from mnn_engine.engine.pool import plan_memory
from mnn_engine.options import go_duration_seconds

GiB = 2**30
CHAT = [{"role": "user", "content": "Who are you?"}]


@pytest.mark.parametrize(("ram", "largest", "asked", "expected"), [
    (6 * GiB, GiB // 2, None, 1),       # a phone: one at a time, whatever fits
    (16 * GiB, GiB, None, 3),           # half of 16 GiB holds 8 of them: Ollama's 3 at most
    (16 * GiB, 5 * GiB, None, 1),       # two of the largest do not fit in half
    (16 * GiB, 3 * GiB, None, 2),
    (0, GiB, None, 3),                  # RAM unknown: no cap from it
    (6 * GiB, GiB, 2, 2),               # asked for: as asked
])
def test_how_many_models_may_be_loaded(ram, largest, asked, expected):
    plan = plan_memory(ram, [largest // 3, largest], asked)
    assert plan.max_loaded == expected and plan.reason


def test_max_loaded_must_be_positive():
    with pytest.raises(MnnEngineError) as err:
        plan_memory(8 * GiB, [], 0)
    assert err.value.param == "max_loaded"


# Go's time.ParseDuration (Ollama's api/types.go Duration.UnmarshalJSON reads keep_alive with it)
@pytest.mark.parametrize(("text", "seconds"), [("5m", 300), ("1h30m", 5400), ("-1m", -60), ("0", 0), ("1.5s", 1.5),
                                               ("300ms", 0.3), ("2h45m10.5s", 9910.5), ("+5s", 5), (".5m", 30)])
def test_go_durations(text, seconds):
    assert math.isclose(go_duration_seconds(text), seconds)


@pytest.mark.parametrize("text", ["300", "", "m", "5x", "1m5", "-", "5 m", "1..5s"])
def test_what_go_refuses(text):
    with pytest.raises(ValueError):
        go_duration_seconds(text)


@given(st.lists(st.tuples(st.integers(0, 999), st.sampled_from(["h", "m", "s", "ms"])), min_size=1, max_size=4))
def test_go_duration_parts_add_up(parts):
    unit = {"h": 3600, "m": 60, "s": 1, "ms": 0.001}
    text = "".join(f"{n}{u}" for n, u in parts)
    assert math.isclose(go_duration_seconds(text), sum(n * unit[u] for n, u in parts), abs_tol=1e-9)


@pytest.mark.parametrize(("body", "expected"), [({}, ...), ({"keep_alive": None}, ...), ({"keep_alive": 0}, 0.0),
                                                ({"keep_alive": 30}, 30.0), ({"keep_alive": "10m"}, 600.0),
                                                ({"keep_alive": -1}, None), ({"keep_alive": "-1m"}, None)])
def test_keep_alive_as_ollama_reads_it(body, expected):
    assert keep_alive_field(body) == expected


@pytest.mark.parametrize("value", [True, [5], "soon", "300", float("nan")])
def test_a_keep_alive_ollama_refuses_is_refused(value):
    with pytest.raises(MnnEngineError) as err:
        keep_alive_field({"keep_alive": value})
    assert err.value.param == "keep_alive"


def test_serve_keep_alive_flag_takes_seconds_and_the_same_durations(capsys):
    from mnn_engine.cli.main import build_parser

    def keep_alive(text):
        return build_parser().parse_args(["serve", f"--keep-alive={text}"]).keep_alive

    assert keep_alive("5m") == 300.0 and keep_alive("300") == 300.0 and keep_alive("0") == 0.0
    assert keep_alive("-1") is None and keep_alive("-1m") is None
    for bad in ("soon", "nan", "5 m"):
        with pytest.raises(SystemExit):
            keep_alive(bad)
        assert "argument --keep-alive" in capsys.readouterr().err


# ---------------------------------------------------------------- on real engines
def test_the_memory_budget_evicts_even_below_max_loaded(store):
    size = store.get("scripted").size_bytes
    pool = ModelPool(store, defaults={"threads": 1}, max_loaded=3, keep_alive=None, memory_budget=size + 1)
    try:
        pool.acquire("scripted").release()
        pool.acquire("tiny").release()  # scripted and tiny together are over the budget
        assert [name for name, _ in pool.loaded_engines()] == ["tiny"]
        alone = ModelPool(store, defaults={"threads": 1}, keep_alive=None, memory_budget=1)
        try:
            alone.acquire("scripted").release()  # a model bigger than the budget still loads, alone
            assert [name for name, _ in alone.loaded_engines()] == ["scripted"]
        finally:
            alone.close()
    finally:
        pool.close()


def test_a_model_preloaded_by_directory_counts_against_the_memory_budget_at_once(store):
    directory = test_model_dir("tiny-scripted")
    size = sum(f.stat().st_size for f in directory.iterdir() if f.is_file())
    pool = ModelPool(store, defaults={"threads": 1}, max_loaded=3, keep_alive=None, memory_budget=size + 1)
    try:
        name = pool.preload(str(directory))  # no facts read yet: its size must count all the same
        pool.acquire("tiny").release()
        assert [loaded for loaded, _ in pool.loaded_engines()] == ["tiny"], f"{name} should have made room"
    finally:
        pool.close()


def test_a_lease_holds_its_model_and_a_load_that_needs_its_room_waits_then_is_busy(store):
    pool = ModelPool(store, defaults={"threads": 1}, max_loaded=1, keep_alive=None)
    try:
        lease = pool.acquire("scripted")
        with pytest.raises(MnnEngineError) as err:
            pool.acquire("tiny", timeout=0.2)
        assert err.value.code == "busy" and "scripted in use" in err.value.message
        assert lease.engine.chat(CHAT).text == SCRIPTED_TEXT  # untouched
        lease.release()
        lease.release()  # idempotent: the count stays right
        other = pool.acquire("tiny", timeout=5)
        assert [name for name, _ in pool.loaded_engines()] == ["tiny"]
        other.release()
    finally:
        pool.close()
    assert pool.loaded_engines() == []


def test_an_unload_while_leased_is_not_undone_by_the_default_release(store):
    """keep_alive 0 on a model another request holds (Ollama: done_reason
    "unload") unloads it when that request ends, although that request's
    release asks for the default keep-alive; a request that leases it
    afterwards brings the default back, as Ollama sets keep_alive at acquire."""
    pool = ModelPool(store, defaults={"threads": 1}, keep_alive=300)
    try:
        holder = pool.acquire("scripted")
        pool.unload("scripted")  # returns at once: the model is leased
        assert [name for name, _ in pool.loaded_engines()] == ["scripted"]
        holder.release()  # the default keep-alive (300 s) must not win
        deadline = time.monotonic() + 30
        while pool.loaded_engines() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert pool.loaded_engines() == []
        first = pool.acquire("scripted")
        pool.unload("scripted")
        second = pool.acquire("scripted")  # a later request: its own (default) keep-alive
        first.release()
        second.release()
        time.sleep(0.5)
        assert [name for name, _ in pool.loaded_engines()] == ["scripted"]
    finally:
        pool.close()


def test_names_resolve_as_clients_write_them(store):
    pool = ModelPool(store, keep_alive=None)
    try:
        assert pool.resolve("scripted") == pool.resolve("Scripted:latest") == "scripted"
        with pytest.raises(MnnEngineError) as err:
            pool.resolve("qwen3:0.6b")
        assert "models pull qwen3-0.6b" in err.value.message
        with pytest.raises(MnnEngineError) as err:
            pool.resolve(None)
        assert err.value.code == "invalid_argument"
        with pytest.raises(MnnEngineError) as err:
            pool.resolve(7)
        assert err.value.param == "model"
        assert pool.preload("tiny") == "tiny" and pool.resolve(None) == "tiny"  # the default
        assert store.in_use("tiny") is True and store.in_use("scripted") is False  # the store knows what is loaded
        with pytest.raises(MnnEngineError) as err:
            store.delete("tiny")
        assert err.value.code == "model_in_use"
        name = pool.preload(str(test_model_dir("tiny-thinking")))  # a directory outside the store: its own name
        assert name == "tiny-thinking" and pool.resolve(None) == name and pool.resolve("tiny-thinking") == name
    finally:
        pool.close()
