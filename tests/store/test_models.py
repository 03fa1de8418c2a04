"""The model store: IDs, validation, import (atomic), list, rename, delete, caches."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support import test_model_dir

from mnn_engine import MnnEngineError, ModelStore, model_id_from_name
from mnn_engine.runtime.model_files import validate_model_dir
from mnn_engine.store.models import store_root

SLUG = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")


# ---------------------------------------------------------------- store root and IDs
def test_store_root_precedence(monkeypatch, tmp_path):
    monkeypatch.setenv("MNN_ENGINE_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert store_root() == tmp_path / "home"
    monkeypatch.delenv("MNN_ENGINE_HOME")
    assert store_root() == tmp_path / "xdg" / "mnn-engine"
    monkeypatch.delenv("XDG_DATA_HOME")
    assert store_root() == Path.home() / ".local" / "share" / "mnn-engine"


@pytest.mark.parametrize(("name", "model_id"), [
    ("Qwen3-0.6B-MNN", "qwen3-0-6b-mnn"),
    ("  SmolLM2 135M (int4) ", "smollm2-135m-int4"),
    ("a__b..c", "a-b-c"),
    ("Модель-1", "1"),
])
def test_model_ids_from_names(name, model_id):
    assert model_id_from_name(name) == model_id


@pytest.mark.parametrize("name", ["", "---", "模型", "../..", "x" * 200])
def test_bad_model_ids(name):
    with pytest.raises(MnnEngineError) as err:
        model_id_from_name(name)
    assert err.value.code == "invalid_argument"


@given(st.text(max_size=150))
def test_model_id_is_a_slug_or_an_error(name):
    try:
        slug = model_id_from_name(name)
    except MnnEngineError as exc:
        assert exc.code == "invalid_argument"
        return
    assert SLUG.match(slug) and len(slug) <= 96
    assert model_id_from_name(slug) == slug


# ---------------------------------------------------------------- validation
def _fake_model(root: Path, config: dict | str, files: dict[str, bytes] | None = None) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for name, data in (files or {"llm.mnn": b"g", "llm.mnn.weight": b"w", "tokenizer.txt": b"t"}).items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    (root / "config.json").write_text(config if isinstance(config, str) else json.dumps(config))
    return root


GOOD = {"llm_model": "llm.mnn", "llm_weight": "llm.mnn.weight", "tokenizer_file": "tokenizer.txt"}


def test_a_complete_fake_model_validates(tmp_path):
    assert validate_model_dir(_fake_model(tmp_path / "m", GOOD), check_contents=False)["llm_model"] == "llm.mnn"


@pytest.mark.parametrize(("config", "param"), [
    ({"llm_weight": "llm.mnn.weight"}, "llm_model"),
    ({**GOOD, "llm_model": ""}, "llm_model"),
    ({**GOOD, "llm_model": 3}, "llm_model"),
    ({**GOOD, "llm_weight": "../outside.weight"}, "llm_weight"),
    ({**GOOD, "llm_weight": "/etc/passwd"}, "llm_weight"),
    ({**GOOD, "tokenizer_file": "missing.txt"}, "tokenizer_file"),
    ({**GOOD, "embedding_file": "nope.bin"}, "embedding_file"),
    ({**GOOD, "is_visual": True}, "visual_model"),
    ({**GOOD, "is_visual": True, "visual_model": "../v.mnn"}, "visual_model"),
    ({**GOOD, "base_dir": ".."}, "base_dir"),
    ("[1, 2]", "config.json"),
    ("{broken", "config.json"),
])
def test_validation_names_the_offending_file(tmp_path, config, param):
    model = _fake_model(tmp_path / "m", config)
    with pytest.raises(MnnEngineError) as err:
        validate_model_dir(model, check_contents=False)
    assert err.value.code == "invalid_model"
    assert err.value.param == param


def test_symlink_escaping_the_directory(tmp_path):
    outside = tmp_path / "outside.weight"
    outside.write_bytes(b"w")
    model = _fake_model(tmp_path / "m", GOOD, {"llm.mnn": b"g", "tokenizer.txt": b"t"})
    (model / "llm.mnn.weight").symlink_to(outside)
    with pytest.raises(MnnEngineError) as err:
        validate_model_dir(model, check_contents=False)
    assert err.value.param == "llm_weight" and "outside" in err.value.message


def test_symlink_inside_the_directory_is_fine(tmp_path):
    model = _fake_model(tmp_path / "m", GOOD, {"llm.mnn": b"g", "tokenizer.txt": b"t", "data/w": b"w"})
    (model / "llm.mnn.weight").symlink_to(model / "data" / "w")
    validate_model_dir(model, check_contents=False)


HOSTILE_NAMES = st.one_of(
    st.text(max_size=40),
    st.sampled_from(["..", "../x", "a/../../x", "/abs", "//x", "\\..\\x", "./ok/../../x", "x/" * 50, "é/ü",
                     "\0", "~", "~/x", "." * 300]),
    st.lists(st.sampled_from(["..", ".", "a", "ü", "llm.mnn"]), max_size=6).map("/".join),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(key=st.sampled_from(["llm_model", "llm_weight", "tokenizer_file", "llm_config", "embedding_file"]),
       name=HOSTILE_NAMES, extra=st.dictionaries(st.text(max_size=8), st.one_of(st.none(), st.integers(), st.text())))
def test_hostile_configs_never_escape_or_crash(tmp_path_factory, key, name, extra):
    root = tmp_path_factory.mktemp("hostile")
    model = _fake_model(root / "m", {**extra, **GOOD, key: name})
    try:
        config = validate_model_dir(model, check_contents=False)
    except MnnEngineError as exc:
        assert exc.code == "invalid_model"
        return
    # accepted: every named file is a real file inside the model directory
    real_root = model.resolve()
    value = config[key]
    target = (model / value).resolve()
    assert real_root in target.parents and target.is_file()


# ---------------------------------------------------------------- import, list, info
@pytest.fixture
def store(tmp_path):
    return ModelStore(tmp_path / "store")


def test_import_list_info(store, tmp_path):
    source = test_model_dir("tiny")
    calls: list[tuple[int, int]] = []
    info = store.import_model(source, model_id="my-tiny", progress=lambda done, total, _f: calls.append((done, total)))
    assert info.id == "my-tiny" and Path(info.path) == store.models_dir / "my-tiny"
    assert "llm.mnn.weight" in info.files and info.size_bytes > 10_000_000
    assert not info.is_visual and info.name == "my-tiny"
    assert calls[-1][0] == calls[-1][1] == info.size_bytes
    assert [done for done, _ in calls] == sorted(done for done, _ in calls)
    assert [m.id for m in store.list()] == ["my-tiny"]
    assert store.get("my-tiny") == info


def test_import_takes_the_directory_name_and_market_metadata(store, tmp_path):
    source = tmp_path / "Qwen3-0.6B-MNN"
    source.mkdir()
    for f in test_model_dir("tiny").iterdir():
        (source / f.name).write_bytes(f.read_bytes())
    (source / "market_config.json").write_text(json.dumps({"modelName": "Qwen3 0.6B (test)"}))
    info = store.import_model(source / "config.json")
    assert info.id == "qwen3-0-6b-mnn" and info.name == "Qwen3 0.6B (test)"


def test_import_refuses_an_existing_id_unless_replace(store):
    store.import_model(test_model_dir("tiny"), model_id="m")
    with pytest.raises(MnnEngineError) as err:
        store.import_model(test_model_dir("tiny-scripted"), model_id="m")
    assert err.value.code == "model_exists"
    replaced = store.import_model(test_model_dir("tiny-scripted"), model_id="m", replace=True)
    assert replaced.size_bytes > store.import_model(test_model_dir("tiny"), model_id="n").size_bytes
    assert [m.id for m in store.list()] == ["m", "n"]


def test_import_refuses_an_invalid_model(store, tmp_path):
    bad = _fake_model(tmp_path / "bad", {"llm_model": ""})
    with pytest.raises(MnnEngineError) as err:
        store.import_model(bad)
    assert err.value.code == "invalid_model"
    assert store.list() == []


def test_import_killed_mid_copy_leaves_nothing_and_retry_works(store):
    source = test_model_dir("tiny-scripted")
    script = textwrap.dedent(f"""
        import sys, time
        from mnn_engine import ModelStore
        def progress(done, total, name):
            if done > 0:
                print("COPYING", flush=True)
                time.sleep(60)
        ModelStore({str(store.root)!r}).import_model({str(source)!r}, model_id="victim", progress=progress)
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, cwd="/")
    assert proc.stdout.readline().strip() == "COPYING"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(30)
    leftovers = [p.name for p in store.models_dir.iterdir()]
    assert leftovers and all(name.startswith(".") for name in leftovers)  # a hidden staging dir
    assert store.list() == []
    with pytest.raises(MnnEngineError):
        store.get("victim")
    info = store.import_model(source, model_id="victim")
    assert info.id == "victim"
    assert [p.name for p in store.models_dir.iterdir()] == ["victim"]  # the stale staging dir is gone


def test_rename_and_delete(store):
    store.import_model(test_model_dir("tiny"), model_id="a")
    store.import_model(test_model_dir("tiny"), model_id="b")
    with pytest.raises(MnnEngineError) as err:
        store.rename("a", "b")
    assert err.value.code == "model_exists"
    with pytest.raises(MnnEngineError) as err:
        store.rename("a", "Not An ID")
    assert err.value.code == "invalid_argument"
    assert store.rename("a", "c").id == "c"
    store.delete("b")
    assert [m.id for m in store.list()] == ["c"]
    with pytest.raises(MnnEngineError) as err:
        store.delete("b")
    assert err.value.code == "model_not_found"


def test_in_use_models_are_protected(store):
    store.import_model(test_model_dir("tiny"), model_id="busy")
    store.in_use = lambda model_id: model_id == "busy"
    for action in (lambda: store.rename("busy", "x"), lambda: store.delete("busy"),
                   lambda: store.clear_cache("busy"),
                   lambda: store.import_model(test_model_dir("tiny"), model_id="busy", replace=True)):
        with pytest.raises(MnnEngineError) as err:
            action()
        assert err.value.code == "model_in_use"


def test_cache_info_and_clear(store):
    store.import_model(test_model_dir("tiny"), model_id="m")
    assert store.cache_info("m") == {"m": 0}
    cache = store.cache_path("m")
    cache.mkdir(parents=True)
    (cache / "mnn_cachefile.bin").write_bytes(b"x" * 1000)
    assert store.cache_info() == {"m": 1000}
    assert store.clear_cache("m") == 1000
    assert store.cache_info("m") == {"m": 0}
    with pytest.raises(MnnEngineError) as err:
        store.cache_info("missing")
    assert err.value.code == "model_not_found"


def test_resolve_ids_and_paths(store):
    store.import_model(test_model_dir("tiny"), model_id="m")
    assert store.resolve("m") == ("m", store.models_dir / "m")
    assert store.resolve(str(store.models_dir / "m"))[0] == "m"
    assert store.resolve(str(test_model_dir("tiny")))[0] is None
    with pytest.raises(MnnEngineError) as err:
        store.resolve("nothing-here")
    assert err.value.code == "model_not_found"


def test_cache_is_emptied_when_the_model_changes(tmp_path):
    from mnn_engine.runtime.prepared_cache import prepare_cache

    model = _fake_model(tmp_path / "m", GOOD)
    cache = tmp_path / "cache"
    prepare_cache(cache, model)
    (cache / "0_0_0_0_0.static").write_bytes(b"prepared weights")
    prepare_cache(cache, model)  # unchanged model: the cache stays
    assert (cache / "0_0_0_0_0.static").exists()
    (model / "llm.mnn.weight").write_bytes(b"new weights")
    prepare_cache(cache, model)
    assert not (cache / "0_0_0_0_0.static").exists() and cache.is_dir()


def test_cache_is_emptied_when_the_engine_build_or_cpu_changes(tmp_path):
    from mnn_engine.runtime.build import engine_identity
    from mnn_engine.runtime.prepared_cache import prepare_cache

    model = _fake_model(tmp_path / "m", GOOD)
    cache = tmp_path / "cache"
    wheel = {"build": {**engine_identity()["build"], "mode": "wheel", "flags": ""}, "cpu": ["avx2", "fma"]}
    source = {"build": {**wheel["build"], "mode": "subproject", "flags": "-DMNN_ENGINE_USE_MNN_HEADERS"},
              "cpu": wheel["cpu"]}
    prepare_cache(cache, model, wheel)
    (cache / "0_0_0_0_0.static").write_bytes(b"weights packed by the wheel")
    prepare_cache(cache, model, wheel)
    assert (cache / "0_0_0_0_0.static").exists()
    prepare_cache(cache, model, source)  # another build over the same store
    assert not (cache / "0_0_0_0_0.static").exists()
    (cache / "0_0_0_0_0.static").write_bytes(b"weights packed for AVX2")
    prepare_cache(cache, model, {**source, "cpu": ["avx2", "avx512f", "avx512_vnni", "fma"]})  # another CPU
    assert not (cache / "0_0_0_0_0.static").exists()
    prepare_cache(cache, model)  # this process's own identity: differs from the fakes
    assert json.loads((cache / "model-stamp.json").read_text())["engine"] == engine_identity()


def test_cpu_kernel_features_from_cpuinfo():
    from mnn_engine.runtime.build import cpu_kernel_features

    x86 = "processor\t: 0\nflags\t\t: fpu sse4_1 avx avx2 fma avx512f avx512_vnni ht\n"
    arm = "processor\t: 0\nFeatures\t: fp asimd evtstrm aes asimdhp asimddp i8mm sve\n"
    assert cpu_kernel_features(x86) == ["avx", "avx2", "avx512_vnni", "avx512f", "fma", "sse4_1"]
    assert cpu_kernel_features(arm) == ["asimd", "asimddp", "asimdhp", "i8mm", "sve"]
    assert cpu_kernel_features("") == []


def test_cache_stamp_follows_the_files_the_config_names(tmp_path):
    from mnn_engine.runtime.prepared_cache import prepare_cache

    files = {"graph.mnn": b"g", "weights.bin": b"w", "tok.txt": b"t"}
    model = _fake_model(tmp_path / "m", {"llm_model": "graph.mnn", "llm_weight": "weights.bin",
                                         "tokenizer_file": "tok.txt"}, files)
    cache = tmp_path / "cache"
    prepare_cache(cache, model)
    (cache / "prepared").write_bytes(b"x")
    (model / "weights.bin").write_bytes(b"other weights")
    prepare_cache(cache, model)
    assert not (cache / "prepared").exists()


def test_store_caches_by_id_or_by_path(tmp_path):
    store = ModelStore(tmp_path / "store")
    model = _fake_model(tmp_path / "m", GOOD)
    by_path = store.prepared_cache(None, model)
    assert by_path.parent == store.cache_dir and by_path.name.startswith("path-") and by_path.is_dir()
    assert store.prepared_cache(None, model) == by_path
    assert store.prepared_cache("some-id", model) == store.cache_path("some-id")
