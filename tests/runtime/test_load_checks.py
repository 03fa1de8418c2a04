"""The load-time checks (batch exactness, verification costs) are kept with the
prepared weights and read by a warm load: measured once per model files,
engine, libMNN, CPU and config (mnn_engine.runtime.load_checks)."""

from __future__ import annotations

import json
import logging

import pytest
from support import MNN_BATCH_EXACT, SCRIPTED_TEXT, test_model_dir

from mnn_engine import Llm
from mnn_engine.runtime import llm as llm_module
from mnn_engine.runtime import load_checks
from mnn_engine.runtime.load_checks import CHECKS_FILE, checks_key, read_checks, write_checks
from mnn_engine.runtime.model_files import file_stamp, model_files, read_config

SAY_TWICE = [{"role": "user", "content": f"Say: {SCRIPTED_TEXT} {SCRIPTED_TEXT}"}]


def _never_measured(*args, **kwargs):
    raise AssertionError("a warm load measured again")


def test_a_warm_load_reads_the_kept_checks_and_prints_nothing_mid_generation(tmp_path, monkeypatch, capfd, caplog):
    cache = tmp_path / "prepared"
    model = test_model_dir("tiny-scripted")
    with Llm(model, thread_num=1, tmp_path=str(cache)) as first:
        verdict, costs, default = first.batch_exact, first.verify_costs, first.speculative_default
    assert verdict == MNN_BATCH_EXACT
    kept = json.loads((cache / CHECKS_FILE).read_text())
    assert list(kept.values()) == [{"batch_exact": verdict, "verify_costs": costs}]
    if default == "ngram":
        # a longer verification never costs less than a shorter one (noise only adds time)
        assert len(costs) == 8 and costs[0] == 1.0 and costs == sorted(costs)

    if default == "ngram":  # what a warm load reads is what is kept: here costs at which every draft pays
        costs = [1.0 + i / 100 for i in range(8)]
        (cache / CHECKS_FILE).write_text(json.dumps({key: {"batch_exact": verdict, "verify_costs": costs}
                                                     for key in kept}))
    monkeypatch.setattr(llm_module, "_rows_batch_independent", _never_measured)
    monkeypatch.setattr(Llm, "_measure_verify_costs", _never_measured)
    with Llm(model, thread_num=1, tmp_path=str(cache)) as warm:
        assert (warm.batch_exact, warm.verify_costs, warm.speculative_default) == (verdict, costs, default)
        capfd.readouterr()
        caplog.set_level(logging.INFO, "mnn_engine.mnn")
        result = warm.generate(SAY_TWICE, temperature=0, max_tokens=48, speculative=default)
        printed = capfd.readouterr()
    assert result.text == SCRIPTED_TEXT
    if default == "ngram":
        assert result.drafted_tokens > 0  # verifications of several lengths ran...
    # ...on modules MNN built mid-generation, which it announced in the log, not on stdout
    assert "clone" not in printed.out + printed.err
    if default == "ngram":
        assert "module need new clone" in caplog.text


def test_another_config_or_changed_files_measure_again(tmp_path, monkeypatch):
    cache = tmp_path / "prepared"
    model = test_model_dir("tiny-scripted")
    with Llm(model, thread_num=1, tmp_path=str(cache)):
        pass
    calls = []
    real = llm_module._rows_batch_independent

    def counted(core):
        calls.append(1)
        return real(core)

    monkeypatch.setattr(llm_module, "_rows_batch_independent", counted)
    with Llm(model, thread_num=2, tmp_path=str(cache)):  # another config
        pass
    assert len(calls) == 1 and len(json.loads((cache / CHECKS_FILE).read_text())) == 2
    with Llm(model, thread_num=2, tmp_path=str(cache)):  # the same again: kept
        pass
    assert len(calls) == 1


def test_the_key_follows_the_engine_the_files_and_the_config(tmp_path, monkeypatch):
    model = tmp_path / "m"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"llm_model": "llm.mnn", "llm_weight": "llm.mnn.weight"}))
    (model / "llm.mnn").write_bytes(b"graph")
    (model / "llm.mnn.weight").write_bytes(b"weights")
    (model / "tokenizer.txt").write_text("430 0\n")
    config = model / "config.json"

    def stamp():  # ModelDir.stamp, without a real graph to read
        return file_stamp(config, model_files(config, read_config(config)))

    base = checks_key(stamp(), {"thread_num": 2}, 7)
    assert checks_key(stamp(), {"thread_num": 2, "tmp_path": "/elsewhere", "use_mmap": True}, 7) == base
    assert checks_key(stamp(), {"thread_num": 4}, 7) != base
    assert checks_key(stamp(), {"thread_num": 2, "precision": "high"}, 7) != base
    assert checks_key(stamp(), {"thread_num": 2}, 3) != base
    identity = load_checks.engine_identity()
    libraries = {**identity["libraries"], "libMNN": ["/other/libMNN.so", 1, 2]}  # a swapped libMNN
    monkeypatch.setattr(load_checks, "engine_identity", lambda: {**identity, "libraries": libraries})
    assert checks_key(stamp(), {"thread_num": 2}, 7) != base
    other_cpu = ["avx2", "fma"] if identity["cpu"] != ["avx2", "fma"] else ["asimd"]  # never this CPU's list
    monkeypatch.setattr(load_checks, "engine_identity", lambda: {**identity, "cpu": other_cpu})
    assert checks_key(stamp(), {"thread_num": 2}, 7) != base
    monkeypatch.undo()
    (model / "llm.mnn.weight").write_bytes(b"new weights")
    assert checks_key(stamp(), {"thread_num": 2}, 7) != base


@pytest.mark.parametrize("content", ["", "{", "[1, 2]", '{"k": {"batch_exact": "yes", "verify_costs": []}}',
                                     '{"k": {"batch_exact": true, "verify_costs": [1.0, -2]}}',
                                     '{"k": {"batch_exact": true, "verify_costs": [true]}}'])
def test_a_damaged_file_is_ignored_and_replaced(tmp_path, content):
    (tmp_path / CHECKS_FILE).write_text(content)
    assert read_checks(tmp_path, "k") is None
    write_checks(tmp_path, "k", True, [1.0, 1.5])
    assert read_checks(tmp_path, "k") == {"batch_exact": True, "verify_costs": [1.0, 1.5]}


def test_only_the_newest_keys_are_kept(tmp_path):
    for i in range(12):
        write_checks(tmp_path, f"k{i}", False, [])
    assert [read_checks(tmp_path, f"k{i}") is not None for i in range(12)] == [False] * 4 + [True] * 8
    (tmp_path / "a-file").write_text("")
    write_checks(tmp_path / "a-file" / "cache", "k", False, [])  # not a directory: nothing kept, nothing raised
