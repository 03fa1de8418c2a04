"""The pool's scheduling rules, each case run on the real ``Engine`` (generated models) and on
tests/engine/fake_engine.py's (no weights: the same case in milliseconds), so the fake stays honest:
LRU under the memory budget, leases that hold a model and a load that waits for room then is busy,
keep-alive 0 on a leased model, concurrent acquires that load once, and a failed load."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from fake_engine import FakeEngine
from support import test_model_dir

from mnn_engine import MnnEngineError, ModelPool


@pytest.fixture(params=["engine", "fake"])
def make_pool(request, store):
    pools = []

    def make(**options) -> ModelPool:
        factory = None if request.param == "engine" else (lambda s, events: FakeEngine(s, events, **fake_options))
        pool = ModelPool(store, defaults={"threads": 1}, engine_factory=factory, **options)
        pools.append(pool)
        return pool

    fake_options: dict = {}
    make.fake_options = fake_options  # a case may slow the fake's loads or make one fail
    make.kind = request.param
    yield make
    for pool in pools:
        pool.close()


def _loaded(pool: ModelPool) -> list[str]:
    return [name for name, _ in pool.loaded_engines()]


def test_the_memory_budget_evicts_the_least_recently_used(make_pool, store):
    pool = make_pool(max_loaded=3, keep_alive=None, memory_budget=store.get("scripted").size_bytes + 1)
    pool.acquire("scripted").release()
    pool.acquire("tiny").release()  # both are over the budget: scripted, the older, goes
    assert _loaded(pool) == ["tiny"]
    pool.acquire("scripted").release()
    assert _loaded(pool) == ["scripted"]


def test_a_lease_holds_its_model_and_a_load_that_needs_its_room_waits_then_is_busy(make_pool):
    pool = make_pool(max_loaded=1, keep_alive=None)
    lease = pool.acquire("scripted")
    started = time.monotonic()
    with pytest.raises(MnnEngineError) as err:
        pool.acquire("tiny", timeout=0.3)
    assert err.value.code == "busy" and "scripted in use" in err.value.message
    assert time.monotonic() - started >= 0.3  # it waited its timeout first
    assert _loaded(pool) == ["scripted"]
    lease.release()
    pool.acquire("tiny", timeout=5).release()
    assert _loaded(pool) == ["tiny"]


def test_keep_alive_zero_on_a_leased_model_unloads_it_when_the_lease_ends(make_pool):
    pool = make_pool(keep_alive=300)
    holder = pool.acquire("scripted")
    pool.unload("scripted")  # returns at once: the model is leased
    assert _loaded(pool) == ["scripted"]
    holder.release()  # the default keep-alive must not win
    deadline = time.monotonic() + 30
    while _loaded(pool) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert _loaded(pool) == []


def test_concurrent_acquires_load_a_model_once(make_pool):
    make_pool.fake_options["load_seconds"] = 0.2  # the real load takes about that
    pool = make_pool(keep_alive=None)
    loads = []
    unsubscribe = pool.events.subscribe(lambda e: e.kind == "model" and e.state == "loaded" and loads.append(e))
    leases, errors = [], []

    def acquire() -> None:
        try:
            leases.append(pool.acquire("scripted", timeout=30))
        except MnnEngineError as exc:  # pragma: no cover - the assertion below names it
            errors.append(exc)

    threads = [threading.Thread(target=acquire) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    unsubscribe()
    assert not errors and len(leases) == 4 and len(loads) == 1
    assert len({id(lease.engine) for lease in leases}) == 1
    for lease in leases:
        lease.release()


def test_a_failed_load_is_the_acquirers_error_and_the_pool_goes_on(make_pool, store):
    if make_pool.kind == "engine":  # a real failure: the weights cut short in the store's copy
        weight = Path(store.get("tiny").path) / "llm.mnn.weight"
        weight.write_bytes(weight.read_bytes()[:1000])
    else:
        make_pool.fake_options["failing"] = frozenset({"tiny"})
    pool = make_pool(max_loaded=1, keep_alive=None)
    with pytest.raises(MnnEngineError) as err:
        pool.acquire("tiny", timeout=5)
    assert err.value.code in ("model_load_failed", "invalid_model")  # MNN refused it, or our check did
    assert _loaded(pool) == []
    pool.acquire("scripted", timeout=5).release()
    assert _loaded(pool) == ["scripted"]


def _with_adapter(store) -> None:
    store.import_adapter(test_model_dir("tiny-scripted-lora"), "scripted", name="says")


def test_an_adapter_loads_over_its_base_and_goes_before_it(make_pool, store):
    _with_adapter(store)
    pool = make_pool(max_loaded=1, keep_alive=None)
    unloads = []
    pool.events.subscribe(lambda e: e.kind == "model" and e.state == "unloaded" and unloads.append(e.data["model_id"]))
    pool.acquire(pool.resolve("scripted_says")).release()  # the base loads beneath it: one model's weights
    assert sorted(_loaded(pool)) == ["scripted", "scripted_says"]
    pool.acquire("tiny").release()  # another model: the adapter, then its base, go
    assert _loaded(pool) == ["tiny"] and unloads == ["scripted_says", "scripted"]


def test_a_leased_adapter_holds_its_base(make_pool, store):
    _with_adapter(store)
    pool = make_pool(max_loaded=1, keep_alive=None)
    lease = pool.acquire("scripted_says")
    with pytest.raises(MnnEngineError) as err:
        pool.acquire("tiny", timeout=0.3)
    assert err.value.code == "busy"
    pool.unload("scripted")  # asked while its adapter is leased: nothing goes under it
    assert sorted(_loaded(pool)) == ["scripted", "scripted_says"]
    lease.release()  # now free, the base goes as asked, its adapter first
    deadline = time.monotonic() + 30
    while _loaded(pool) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert _loaded(pool) == []
    pool.acquire("tiny", timeout=5).release()
    assert _loaded(pool) == ["tiny"]
