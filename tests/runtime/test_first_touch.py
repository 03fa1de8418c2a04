"""Damaged model files give invalid_model and this process lives
(mnn_engine.runtime.first_touch, mnn_engine.runtime.model_files, mnn_engine.runtime.mnn_graph)."""

from __future__ import annotations

import functools
import os
import random
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support import test_model_dir

from mnn_engine import Llm, MnnEngineError, ModelStore
from mnn_engine.runtime.first_touch import markers_dir
from mnn_engine.runtime.mnn_graph import read_graph

FILES = ("llm.mnn", "llm.mnn.weight", "tokenizer.mtok", "llm_config.json", "config.json")


@pytest.fixture(autouse=True)
def _own_markers(tmp_path, monkeypatch):
    monkeypatch.setenv("MNN_ENGINE_HOME", str(tmp_path / "home"))


@functools.cache
def _tiny() -> Path:
    return test_model_dir("tiny")


def _damaged(root: Path, name: str, how: str, rng: random.Random) -> Path:
    model = root / f"{name}-{how}-{rng.randrange(10**9)}"
    shutil.copytree(_tiny(), model)
    path = model / name
    data = bytearray(path.read_bytes())
    if how == "truncate":
        data = data[: rng.randrange(len(data))]
    elif how == "random":
        data = bytearray(rng.randbytes(len(data)))
    else:  # flip bytes
        for _ in range(rng.randint(1, 16)):
            data[rng.randrange(len(data))] = rng.randrange(256)
    path.write_bytes(bytes(data))
    return model


def _open(model: Path) -> str:
    """'ok' or the error code; a crash here would end the test run."""
    try:
        with Llm(model) as llm:
            llm.generate("hi", max_tokens=2, temperature=0)
        return "ok"
    except MnnEngineError as exc:
        assert exc.code in ("invalid_model", "model_load_failed", "model_not_found"), exc
        return exc.code


@pytest.mark.parametrize(("name", "how"), [
    ("tokenizer.mtok", "truncate"), ("tokenizer.mtok", "random"),
    ("llm.mnn", "truncate"), ("llm.mnn", "random"), ("llm.mnn.weight", "truncate"),
])
def test_damaged_file_is_invalid_model(tmp_path, name, how):
    model = _damaged(tmp_path, name, how, random.Random(f"{name}{how}"))
    with pytest.raises(MnnEngineError) as err:
        Llm(model).load()
    assert err.value.code == "invalid_model"
    message = err.value.message
    assert name in message or "crashed" in message, message


def test_random_weights_are_invalid_model_before_mnn_reads_them(tmp_path):
    """MNN 3.6.1 "loaded" this model: every layer failed to read its weights ("Read shape error",
    "can't extract IDST Convolution") and it answered from a graph without them; a header that
    parsed made it size its buffers by random dimensions. The layers' headers are checked first."""
    model = _damaged(tmp_path, "llm.mnn.weight", "random", random.Random(6001))
    with pytest.raises(MnnEngineError) as err:
        Llm(model)
    assert err.value.code == "invalid_model" and err.value.param == "llm_weight"
    assert "layer /layers.0/" in err.value.message, err.value.message
    assert not markers_dir().exists()  # no child was needed: MNN never saw the files


def test_a_layer_claiming_more_weights_than_its_shape_is_invalid_model(tmp_path):
    model = tmp_path / "overclaiming"
    shutil.copytree(_tiny(), model)
    layer = read_graph((model / "llm.mnn").read_bytes()).quantized[0]
    assert not layer.shape_int32
    with open(model / "llm.mnn.weight", "r+b") as f:  # the first dimension, 16-bit: four times as many rows
        f.seek(layer.offset + 1)
        rows = int.from_bytes(f.read(2), "little")
        f.seek(layer.offset + 1)
        f.write((rows * 4).to_bytes(2, "little"))
    with pytest.raises(MnnEngineError) as err:
        Llm(model).load()
    assert err.value.code == "invalid_model", err.value
    assert f"layer {layer.layer}" in err.value.message and str(layer.count) in err.value.message, err.value.message


@pytest.mark.parametrize(("name", "how", "says"), [
    ("visual.mnn.weight", "random", "visual.mnn.weight is damaged: layer"),
    ("visual.mnn.weight", "truncate", "visual.mnn.weight is truncated"),
    ("visual.mnn", "truncate", "visual.mnn is not a readable MNN graph"),
])
def test_a_damaged_vision_encoder_is_invalid_model_before_mnn_reads_it(tmp_path, name, how, says):
    """The encoder's graph and its weights (MNN reads them from the graph's name + ".weight") get the
    checks the language model's get."""
    model = tmp_path / f"{name}-{how}"
    shutil.copytree(test_model_dir("tiny-vision"), model)
    path = model / name
    data = path.read_bytes()
    rng = random.Random(11)
    path.write_bytes(rng.randbytes(len(data)) if how == "random" else data[: len(data) // 2])
    with pytest.raises(MnnEngineError) as err:
        Llm(model)
    assert err.value.code == "invalid_model" and err.value.param == "visual_model", err.value
    assert says in err.value.message, err.value.message


def test_truncated_tokenizer_is_refused_at_import_and_the_store_stays_clean(tmp_path):
    model = _damaged(tmp_path, "tokenizer.mtok", "truncate", random.Random(3))
    store = ModelStore(tmp_path / "store")
    with pytest.raises(MnnEngineError) as err:
        store.import_model(model, model_id="broken")
    assert err.value.code == "invalid_model" and "crashed" in err.value.message
    assert store.list() == [] and not store.exists("broken")


def test_a_good_model_is_checked_once(tmp_path):
    model = tmp_path / "m"
    shutil.copytree(test_model_dir("tiny"), model)
    Llm(model).load().close()
    markers = list(markers_dir().iterdir())
    assert len(markers) == 1
    Llm(model).load().close()
    assert list(markers_dir().iterdir()) == markers
    os.utime(model / "llm.mnn.weight")  # a new version of the files: checked again
    Llm(model).load().close()
    assert len(list(markers_dir().iterdir())) == 2


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.sampled_from(FILES), st.sampled_from(["truncate", "flip", "random"]), st.integers(0, 2**32))
def test_fuzzed_model_files_never_kill_the_process(tmp_path, name, how, seed):
    _open(_damaged(tmp_path, name, how, random.Random(seed)))


@pytest.mark.slow
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.sampled_from(FILES), st.sampled_from(["truncate", "flip", "random"]), st.integers(0, 2**32))
def test_fuzzed_model_files_never_kill_the_process_long(tmp_path, name, how, seed):
    _open(_damaged(tmp_path, name, how, random.Random(seed)))


def test_a_vision_model_whose_visual_graph_is_a_text_graph_is_invalid_at_load(tmp_path):
    """#42 item 4: ``is_visual`` with the text graph copied in as visual.mnn passed every load check
    and killed the server (SIGSEGV) on its first image. The first-touch child now runs the visual
    graph on an image too; the crash there is this model's invalid_model, and this process lives."""
    model = tmp_path / "wrong-visual"
    shutil.copytree(test_model_dir("tiny-vision"), model)
    shutil.copyfile(model / "llm.mnn", model / "visual.mnn")
    with pytest.raises(MnnEngineError) as err:
        Llm(model).load()
    assert err.value.code == "invalid_model", err.value
    assert "visual encoder" in err.value.message or "visual" in err.value.message, err.value.message
    with Llm(test_model_dir("tiny-vision")) as sound:  # the real one still loads (its own marker)
        assert sound.generate("hi", max_tokens=1, temperature=0).text is not None


def test_the_check_ends_with_the_process_that_asked_for_it():
    """A first-touch child whose parent died (a server killed mid-check) exits within seconds rather
    than keep MNN busy on a damaged model for up to the check's timeout (seen: an orphan on a graph
    with a billion groups, still loading 13 minutes later)."""
    import subprocess
    import sys
    import time

    waiter = ("import time; from mnn_engine.runtime.first_touch_child import end_with_parent; "
              "end_with_parent(); print('ready', flush=True); time.sleep(120)")
    parent = ("import subprocess, sys; child = subprocess.Popen([sys.executable, '-c', sys.argv[1]], "
              "stdout=subprocess.PIPE, text=True); assert child.stdout.readline() == 'ready\\n'; print(child.pid)")
    # (from /, as the check's own command drops the current directory: a source checkout there would
    # shadow the installed package, which in system mode is the only one with the extension)
    orphan = int(subprocess.run([sys.executable, "-c", parent, waiter], capture_output=True, text=True,
                                check=True, timeout=60, cwd="/").stdout)
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{orphan}/stat") as stat:
                if stat.read().rsplit(")", 1)[1].split()[0] in ("Z", "X"):  # ended (not yet reaped)
                    break
        except FileNotFoundError:
            break
        time.sleep(0.2)
    else:
        raise AssertionError(f"the orphaned check {orphan} is still running")
