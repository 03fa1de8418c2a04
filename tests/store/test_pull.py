"""Pulling models from a hub on loopback that speaks Hugging Face's and
ModelScope's protocols and serves manifests; the faults a phone's connection
and disk bring, one by one."""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from fake_hub import CATALOG_REPO, FAST, WEIGHT, FakeHub, repo_from_dir
from support import SCRIPTED_TEXT, test_model_dir

from mnn_engine import Engine, Llm, MnnEngineError, ModelStore
from mnn_engine.hub import sources
from mnn_engine.store.pull import DISK_RESERVE


@pytest.fixture
def hub(model_repo, monkeypatch):
    with FakeHub() as fake:
        fake.hf[CATALOG_REPO] = model_repo
        fake.modelscope["MNN/Qwen3-0.6B-MNN"] = model_repo
        monkeypatch.setenv("HF_ENDPOINT", fake.url)
        monkeypatch.setenv("MODELSCOPE_DOMAIN", fake.url)
        for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "MODELSCOPE_API_TOKEN"):
            monkeypatch.delenv(name, raising=False)
        yield fake


@pytest.fixture
def store(tmp_path):
    return ModelStore(tmp_path / "home")


def _says_its_sentence(path: str) -> None:
    with Llm(path, thread_num=1) as llm:
        assert llm.generate([{"role": "user", "content": "hi"}], temperature=0).text == SCRIPTED_TEXT


def _code(action) -> MnnEngineError:
    with pytest.raises(MnnEngineError) as err:
        action()
    return err.value


def _nothing_left(store: ModelStore, model_id: str) -> None:
    assert [m.id for m in store.list()] == []
    assert not store.path(model_id).exists()


# ---------------------------------------------------------------- the three sources
def test_pull_a_catalog_name_from_hugging_face(hub, store, model_repo):
    seen = []
    info = store.pull("qwen3-0.6b", progress=lambda done, total, name: seen.append((done, total)), **FAST)
    assert info.id == "qwen3-0-6b" and [m.id for m in store.list()] == ["qwen3-0-6b"]
    assert info.source["source"] == "hf" and info.source["repo"] == CATALOG_REPO
    assert info.source["commit"] == model_repo.commit
    total = sum(len(b) for b in model_repo.files.values())
    assert seen[0] == (0, total) and seen[-1] == (total, total)
    assert all(a[0] <= b[0] for a, b in itertools.pairwise(seen))
    assert store.resolve("qwen3-0.6b")[0] == "qwen3-0-6b"  # the catalog name finds it
    _says_its_sentence(info.path)
    hub.served.clear()
    assert store.pull("qwen3-0.6b", **FAST).id == "qwen3-0-6b" and hub.served == {}  # already there


def test_pull_from_modelscope_and_a_manifest(hub, store, model_repo):
    info = store.pull("modelscope:MNN/Qwen3-0.6B-MNN", **FAST)
    assert info.id == "qwen3-0-6b-mnn" and info.source["source"] == "modelscope"
    url = hub.add_manifest("scripted", model_repo, name="Scripted test model")
    info = store.pull(url, **FAST)
    assert info.id == "scripted" and info.source["source"] == "manifest"
    _says_its_sentence(info.path)


@pytest.mark.parametrize(("change", "message"), [
    (lambda m: m.update(format="other/1"), "not a manifest"),
    (lambda m: m.update(version=""), "version"),
    (lambda m: m["files"].append(dict(m["files"][0])), "listed twice"),
    (lambda m: m["files"][0].update(path="../escape"), "relative path"),
    (lambda m: m["files"][0].update(path="/etc/passwd"), "relative path"),
    (lambda m: m["files"][0].update(size=-1), "size"),
    (lambda m: m["files"][0].update(sha256="ABC"), "sha256"),
    (lambda m: m.update(files=[]), "non-empty"),
    (lambda m: m.update(min_engine_version="one"), "not a version"),
])
def test_malformed_manifests_are_refused(change, message):
    manifest = {"format": "mnn-engine-manifest/1", "id": "m", "version": "1",
                "files": [{"path": "config.json", "size": 2, "sha256": "0" * 64}]}
    change(manifest)
    error = _code(lambda: sources.parse_manifest(manifest, "http://127.0.0.1/m.json"))
    assert error.code == "invalid_manifest" and message in error.message


def test_a_manifest_for_a_newer_engine_is_refused(hub, store, model_repo):
    url = hub.add_manifest("future", model_repo, min_engine_version="99.0")
    error = _code(lambda: store.pull(url, **FAST))
    assert error.code == "engine_too_old" and "99.0" in error.message
    assert hub.served == {}


def test_catalog_entries_for_a_newer_mnn_are_marked_and_refused(tmp_path, monkeypatch, store):
    catalog = {"models": [{"name": "future-model", "hf": "org/Future-MNN", "parameters": "1B",
                           "size_bytes": 1, "min_mnn": "99.0"}]}
    (tmp_path / "catalog.json").write_text(json.dumps(catalog))
    monkeypatch.setenv("MNN_ENGINE_CATALOG", str(tmp_path / "catalog.json"))
    error = _code(lambda: store.pull("future-model", **FAST))
    assert error.code == "engine_too_old" and "99.0" in error.message


# ---------------------------------------------------------------- faults
def test_a_dropped_connection_resumes_where_it_stopped(hub, store, model_repo):
    size = len(model_repo.files[WEIGHT])
    hub.faults.drop_after[WEIGHT] = size // 3
    info = store.pull("qwen3-0.6b", **FAST)
    assert hub.served[WEIGHT] == size  # one third, then the rest: nothing sent twice
    assert (WEIGHT, f"bytes={size // 3}-") in hub.ranges
    _says_its_sentence(info.path)


def test_one_corrupt_byte_is_refused_and_nothing_activated(hub, store):
    hub.faults.corrupt.add(WEIGHT)
    error = _code(lambda: store.pull("qwen3-0.6b", **FAST))
    assert error.code == "pull_corrupt" and WEIGHT in error.message and "SHA-256" in error.message
    _nothing_left(store, "qwen3-0-6b")
    assert not list((store.root / "downloads").rglob(WEIGHT + "*"))  # the bad bytes are gone


def test_small_files_are_checked_by_their_git_blob_hash(hub, store):
    hub.faults.corrupt.add("config.json")
    error = _code(lambda: store.pull("qwen3-0.6b", **FAST))
    assert error.code == "pull_corrupt" and "config.json" in error.message and "git SHA-1" in error.message


def test_missing_repository_and_missing_file(hub, store):
    error = _code(lambda: store.pull("hf:nobody/Nothing-MNN", **FAST))
    assert error.code == "model_not_found" and "HF_TOKEN" in error.message
    assert _code(lambda: store.pull("modelscope:nobody/Nothing-MNN", **FAST)).code == "model_not_found"
    hub.faults.missing.add("tokenizer.mtok")
    error = _code(lambda: store.pull("qwen3-0.6b", **FAST))
    assert error.code == "model_not_found" and "tokenizer.mtok" in error.message
    _nothing_left(store, "qwen3-0-6b")


@pytest.mark.parametrize("source", ["hf", "modelscope"])
def test_a_gated_repository_names_the_token_variable(hub, store, monkeypatch, source):
    repo = CATALOG_REPO if source == "hf" else "MNN/Qwen3-0.6B-MNN"
    variable = "HF_TOKEN" if source == "hf" else "MODELSCOPE_API_TOKEN"
    hub.faults.gated[repo] = "secret"
    error = _code(lambda: store.pull("qwen3-0.6b", source=source, **FAST))
    assert error.code == "pull_unauthorized" and variable in error.message
    monkeypatch.setenv(variable, "wrong")
    assert "HTTP 403" in _code(lambda: store.pull("qwen3-0.6b", source=source, **FAST)).message
    monkeypatch.setenv(variable, "secret")
    assert store.pull("qwen3-0.6b", source=source, **FAST).id == "qwen3-0-6b"


def test_server_errors_are_retried_with_backoff(hub, store):
    hub.faults.statuses[WEIGHT] = [503, 502]
    assert store.pull("qwen3-0.6b", **FAST).id == "qwen3-0-6b"
    hub.faults.statuses["config.json"] = [500] * 10
    error = _code(lambda: store.pull("hf:taobao-mnn/Qwen3-0.6B-MNN", **FAST))
    assert error.code == "pull_failed" and "config.json" in error.message and "retries" in error.message


def test_not_enough_disk_space_is_said_before_downloading(hub, store, monkeypatch):
    import shutil

    real = shutil.disk_usage
    monkeypatch.setattr(shutil, "disk_usage", lambda path: real(path)._replace(free=DISK_RESERVE + 1000))
    error = _code(lambda: store.pull("qwen3-0.6b", **FAST))
    assert error.code == "disk_full" and "MiB" in error.message
    assert hub.served == {}


PULL_CHILD = textwrap.dedent("""
    import json, resource, signal, sys
    from mnn_engine import ModelStore, MnnEngineError
    if len(sys.argv) > 2:  # a file size limit: the disk is "full" at that many bytes
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (int(sys.argv[2]), int(sys.argv[2])))
    try:
        ModelStore(sys.argv[1]).pull("qwen3-0.6b", backoff=(0.01,))
        print("pulled")
    except MnnEngineError as exc:
        print(json.dumps({"code": exc.code, "message": exc.message}))
""")


def _child(store: ModelStore, *extra: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", PULL_CHILD, str(store.root), *extra], cwd="/", env=os.environ,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait_for_bytes(hub: FakeHub, count: int, child: subprocess.Popen) -> None:
    deadline = time.monotonic() + 60
    while hub.served.get(WEIGHT, 0) < count:
        assert child.poll() is None, child.communicate()
        assert time.monotonic() < deadline
        time.sleep(0.02)


def test_a_full_disk_fails_clearly_and_the_pull_resumes(hub, store):
    child = _child(store, str(4 << 20))
    out, err = child.communicate(timeout=120)
    result = json.loads(out.strip().splitlines()[-1])
    assert result["code"] == "disk_full" and "resumes" in result["message"], err
    _nothing_left(store, "qwen3-0-6b")
    big = "embeddings_bf16.bin"  # the largest file, started first: part of it is on disk
    kept = sum(p.stat().st_size for p in (store.root / "downloads").rglob("*.part"))
    assert kept > 0
    before = hub.served[big]
    store.pull("qwen3-0.6b", **FAST)
    assert hub.served[big] - before < len(hub.hf[CATALOG_REPO].files[big])


@pytest.mark.parametrize("how", [signal.SIGINT, signal.SIGKILL])
def test_interrupted_pull_resumes_from_the_bytes_on_disk(hub, store, how):
    size = len(hub.hf[CATALOG_REPO].files[WEIGHT])
    hub.faults.delay_s = 0.02  # a slow server: 64 KiB per 20 ms
    child = _child(store)
    _wait_for_bytes(hub, size // 4, child)
    child.send_signal(how)
    child.communicate(timeout=60)
    _nothing_left(store, "qwen3-0-6b")
    hub.faults.delay_s = 0.0
    first = hub.served[WEIGHT]
    info = store.pull("qwen3-0.6b", **FAST)
    resumed = hub.served[WEIGHT] - first
    assert resumed < size and first + resumed <= size + (1 << 20), (first, resumed, size)
    _says_its_sentence(info.path)


def test_two_pulls_of_one_model_one_is_refused(hub, store):
    hub.faults.delay_s = 0.01
    child = _child(store)
    _wait_for_bytes(hub, 1 << 20, child)
    error = _code(lambda: store.pull("qwen3-0.6b", **FAST))
    assert error.code == "pull_busy"
    hub.faults.delay_s = 0.0
    out, _ = child.communicate(timeout=120)
    assert out.strip().endswith("pulled")
    _says_its_sentence(store.get("qwen3-0-6b").path)


# ---------------------------------------------------------------- updates and rollback
def test_update_keeps_the_previous_version_and_rollback_restores_it(hub, store, model_repo):
    first = store.pull("qwen3-0.6b", **FAST)
    hub.hf[CATALOG_REPO] = repo_from_dir(test_model_dir("tiny-scripted"), commit="b" * 40,
                                         extra={"NOTES.md": b"second revision\n"})
    assert store.pull("qwen3-0.6b", **FAST).source["commit"] == "a" * 40  # without --update: no change
    engine = Engine(store)
    engine.load("qwen3-0-6b", threads=1)
    error = _code(lambda: store.pull("qwen3-0.6b", update=True, **FAST))
    assert error.code == "model_in_use"
    assert store.get("qwen3-0-6b").source["commit"] == "a" * 40  # the loaded model is untouched
    engine.unload()
    hub.served.clear()
    second = store.pull("qwen3-0.6b", update=True, **FAST)
    assert hub.served == {}  # the finished download was kept: only the activation was left
    assert second.source["commit"] == "b" * 40 and "NOTES.md" in second.files
    assert second.previous["revision"] == "a" * 40 and second.previous["size_bytes"] == first.size_bytes
    back = store.rollback("qwen3-0-6b")
    assert back.source["commit"] == "a" * 40 and back.previous["revision"] == "b" * 40
    _says_its_sentence(back.path)
    assert store.rollback("qwen3-0-6b").source["commit"] == "b" * 40
    store.delete("qwen3-0-6b")
    assert not store.previous_path("qwen3-0-6b").exists()
    engine.close()


def test_rollback_without_a_previous_version(store, hub):
    store.pull("qwen3-0.6b", **FAST)
    assert _code(lambda: store.rollback("qwen3-0-6b")).code == "model_not_found"


def test_unknown_specs_say_what_is_accepted(store):
    error = _code(lambda: store.pull("no-such-model"))
    assert error.code == "model_not_found" and "models catalog" in error.message
    assert _code(lambda: store.pull("qwen3-0.6b", source="github")).code == "invalid_argument"
    assert Path(store.root).exists() is False or not (store.root / "models").exists()


# ---------------------------------------------------------------- the engine and the command line
def test_engine_pull_reports_events(hub, store):
    engine = Engine(store)
    events = []
    engine.events.subscribe(lambda event: events.append(event) if event.kind == "pull" else None)
    engine.pull("qwen3-0.6b", backoff=(0.01,))
    states = [e.state for e in events]
    assert states[0] == "running" and "progress" in states and states[-1] == "done"
    with pytest.raises(MnnEngineError):
        engine.pull("hf:nobody/Nothing-MNN")
    assert events[-1].state == "failed" and events[-1].data["error"] == "model_not_found"
    assert engine.snapshot()["last_error"]["code"] == "model_not_found"
    engine.close()


def _cli(store: ModelStore, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mnn_engine", *args], capture_output=True, text=True, timeout=300,
                          cwd="/", env=dict(os.environ, MNN_ENGINE_HOME=str(store.root)), stdin=subprocess.DEVNULL)


def test_command_line_pull_catalog_info_rollback(hub, store):
    shown = _cli(store, "models", "pull", "qwen3-0.6b", "--progress")
    assert shown.returncode == 0, shown.stderr
    assert "pulling [" in shown.stderr and "/s" in shown.stderr and "qwen3-0-6b:" in shown.stdout
    listed = json.loads(_cli(store, "models", "catalog", "--json").stdout)
    row = next(r for r in listed if r["name"] == "qwen3-0.6b")
    assert row["installed"] and row["supported"] and row["hf"] == CATALOG_REPO
    hub.hf[CATALOG_REPO] = repo_from_dir(test_model_dir("tiny-scripted"), commit="c" * 40,
                                         extra={"NOTES.md": b"new\n"})
    updated = json.loads(_cli(store, "models", "pull", "qwen3-0.6b", "--update", "--json").stdout)
    assert updated["source"]["commit"] == "c" * 40 and updated["previous"]["revision"] == "a" * 40
    info = _cli(store, "models", "info", "qwen3-0-6b").stdout
    assert "previous  revision " + "a" * 40 in info and "models rollback" in info
    assert "back at revision aaaaaaaaaaaa" in _cli(store, "models", "rollback", "qwen3-0-6b").stdout
    failed = _cli(store, "models", "pull", "hf:nobody/Nothing-MNN")
    assert failed.returncode == 2 and "[model_not_found]" in failed.stderr


def test_generate_pulls_a_catalog_model_it_does_not_have(hub, store):
    result = _cli(store, "generate", "qwen3-0.6b", "hi", "--temperature", "0", "--threads", "1")
    assert result.returncode == 0, result.stderr
    assert result.stdout == SCRIPTED_TEXT + "\n"
    assert store.get("qwen3-0-6b").source["repo"] == CATALOG_REPO


def test_chat_asks_before_pulling_on_a_terminal(hub, store):
    import pexpect

    env = dict(os.environ, MNN_ENGINE_HOME=str(store.root))

    def chat(*extra: str) -> pexpect.spawn:
        return pexpect.spawn(sys.executable, ["-m", "mnn_engine", "chat", "qwen3-0.6b", "--threads", "1", *extra],
                             env=env, cwd="/", encoding="utf-8", timeout=120)

    child = chat()
    try:
        child.expect(r"Pull it from Hugging Face \(taobao-mnn/Qwen3-0.6B-MNN, 433\.4 MiB\)\? \[Y/n\] ")  # exact
        child.sendline("n")
        child.expect(r"\[model_not_found\] qwen3-0.6b is not in the store")
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    assert hub.served == {} and store.list() == []
    child = chat("--temperature", "0")
    try:
        child.expect(r"\[Y/n\] ")
        child.sendline("")
        child.expect("pulling \\[")
        child.expect("you> ")
        child.sendline("hi")
        child.expect_exact(SCRIPTED_TEXT)
        child.expect("you> ")
        child.sendeof()
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)


# ---------------------------------------------------------------- LoRA adapters (issue 46)
def test_an_adapter_export_is_pulled_over_its_base_and_a_model_pull_says_how(hub, store, model_repo):
    store.import_model(test_model_dir("tiny-scripted"), model_id="scripted")
    hub.hf["someone/Qwen3-tone-MNN"] = repo_from_dir(test_model_dir("tiny-scripted-lora"))
    err = _code(lambda: store.pull("hf:someone/Qwen3-tone-MNN", **FAST))
    assert err.code == "invalid_argument" and "--base" in err.message  # a model pull names the way
    info = store.pull("hf:someone/Qwen3-tone-MNN", base="scripted", **FAST)
    assert info.id == "scripted_qwen3-tone-mnn" and [a.id for a in store.adapters()] == [info.id]
    assert not (store.root / "downloads" / "adapter-scripted_qwen3-tone-mnn").exists()
    hub.served.clear()
    assert store.pull("hf:someone/Qwen3-tone-MNN", base="scripted", **FAST).id == info.id and hub.served == {}
    err = _code(lambda: store.pull("qwen3-0.6b", base="scripted", **FAST))  # a whole model is no adapter
    assert err.code == "invalid_model" and "without --base" in err.message
    store.import_model(test_model_dir("tiny"), model_id="tiny")
    err = _code(lambda: store.pull("hf:someone/Qwen3-tone-MNN", base="tiny", model_id="x", **FAST))
    assert err.code == "invalid_model" and "adapter" in err.message  # exported over another model
    assert [a.id for a in store.adapters()] == [info.id]
