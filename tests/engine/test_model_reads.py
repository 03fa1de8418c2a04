"""A model directory is read once (``runtime.model_files.ModelDir``, kept by the store):
loading a model on demand reads its config.json once, validates its files once and reads
its graph once in the serving process (the first-touch child, another process, reads them
again as it must: it is what survives a crash)."""

from __future__ import annotations

import collections

import pytest

from mnn_engine import ModelPool
from mnn_engine.runtime import mnn_graph, model_files


@pytest.fixture
def reads(monkeypatch):
    """Counts: config.json reads, file-set validations (the graph named in them), graph reads."""
    counts: collections.Counter[str] = collections.Counter()
    read_json, inside, read_graph = model_files._read_json, model_files._inside, mnn_graph.read_graph

    def counting_read_json(path):
        counts[f"read {path.name}"] += 1
        return read_json(path)

    def counting_inside(root, name, key):
        if key == "llm_model":
            counts["validate files"] += 1
        return inside(root, name, key)

    def counting_read_graph(data):
        counts["read graph"] += 1
        return read_graph(data)

    monkeypatch.setattr(model_files, "_read_json", counting_read_json)
    monkeypatch.setattr(model_files, "_inside", counting_inside)
    monkeypatch.setattr(model_files, "read_graph", counting_read_graph)
    monkeypatch.setattr(mnn_graph, "read_graph", counting_read_graph)
    return counts


def test_an_on_demand_load_reads_the_model_once(store, reads):
    pool = ModelPool(store, defaults={"threads": 1}, keep_alive=None)
    try:
        reads.clear()  # what the pool read of the store's listing when it started is not this load's
        entry = pool.model("tiny")  # the listing's facts first, as /v1/models before a request
        lease = pool.acquire("tiny")
        try:
            assert lease.engine.generate("Hi", max_tokens=2).completion_tokens == 2
        finally:
            lease.release()
        assert entry["kind"] == "chat"
        assert reads["read config.json"] == 1, reads
        assert reads["validate files"] == 1, reads
        assert reads["read graph"] == 1, reads
        # a second load of the unchanged model (after an unload) reads nothing again
        pool.unload("tiny")
        pool.acquire("tiny").release()
        assert reads["read config.json"] == 1 and reads["read graph"] == 1, reads
    finally:
        pool.close()


def test_a_replaced_model_is_read_again(store):
    first = store.model_dir(store.path("tiny"))
    assert store.model_dir(store.path("tiny")) is first
    config = store.path("tiny") / "config.json"
    config.write_text(config.read_text() + "\n")  # another size: stale
    assert first.is_stale()
    again = store.model_dir(store.path("tiny"))
    assert again is not first and not again.is_stale() and again.config == first.config
