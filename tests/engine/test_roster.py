"""The roster (``engine.roster.ModelRoster``): the names a server serves and
each model's facts, apart from the pool's scheduling. No model is loaded here."""

from __future__ import annotations

import os
import shutil

import pytest
from support import test_model_dir

from mnn_engine import MnnEngineError
from mnn_engine.engine.roster import ModelRoster


def test_names_are_the_store_and_the_directories_added(store, tmp_path):
    roster = ModelRoster(store)
    assert roster.names() == ["scripted", "tiny"]
    outside = tmp_path / "elsewhere" / "my-model"
    shutil.copytree(test_model_dir("tiny"), outside)
    assert roster.add(str(outside)) == "my-model"
    assert roster.add("tiny") == "tiny"  # a store model is served anyway: nothing to add
    assert roster.names() == ["my-model", "scripted", "tiny"]
    assert roster.target("my-model") == (None, str(outside))
    assert roster.target("tiny") == ("tiny", "tiny")


@pytest.mark.parametrize("asked, served", [("tiny", "tiny"), ("tiny:latest", "tiny"), ("TINY", "tiny"),
                                           ("scripted", "scripted")])
def test_a_request_names_a_model_as_ollama_and_openai_clients_spell_it(store, asked, served):
    assert ModelRoster(store).resolve(asked) == served


def test_an_unknown_name_is_not_found_and_a_catalog_name_says_how_to_pull_it(store):
    roster = ModelRoster(store)
    with pytest.raises(MnnEngineError) as err:
        roster.resolve("no-such-model")
    assert err.value.code == "model_not_found" and err.value.message.startswith('model "no-such-model" not found')
    with pytest.raises(MnnEngineError) as err:
        roster.resolve("qwen3:0.6b")
    assert err.value.code == "model_not_found" and "models pull" in err.value.message


def test_facts_are_read_once_and_again_after_the_model_was_replaced(store, monkeypatch):
    import mnn_engine.engine.roster as roster_module

    reads = []
    real = roster_module.read_facts
    monkeypatch.setattr(roster_module, "read_facts", lambda *a: reads.append(a[1]) or real(*a))
    roster = ModelRoster(store)
    first = roster.facts("tiny")
    assert roster.facts("tiny") is first and reads == ["tiny"]
    assert roster.size("tiny") == first.size_bytes == store.get("tiny").size_bytes
    path = store.path("tiny")
    stamp = path.stat().st_mtime + 5
    os.utime(path, (stamp, stamp))  # what import --replace and pull --update leave
    assert roster.facts("tiny") is not first and reads == ["tiny", "tiny"]


def test_a_size_not_readable_now_is_asked_again(store):
    roster = ModelRoster(store)
    assert roster.size("late") == 0  # no such model yet: its load will say so, and 0 is not kept
    store.import_model(test_model_dir("tiny"), model_id="late")
    assert roster.size("late") == store.get("late").size_bytes > 0
