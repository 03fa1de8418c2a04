"""Pulls against hubs as they really are (issue 27): each fault is the real
services' behaviour, as the fake hub's comments name its source."""

from __future__ import annotations

import itertools
import json
import time
from pathlib import Path

import pytest
from fake_hub import CATALOG_REPO, FAST, MS_REPO, WEIGHT, FakeHub, Repo

from mnn_engine import MnnEngineError, ModelStore
from mnn_engine.hub import sources


@pytest.fixture
def hub(model_repo, monkeypatch, tmp_path):
    with FakeHub() as fake:
        fake.hf[CATALOG_REPO] = model_repo
        fake.modelscope[MS_REPO] = model_repo
        monkeypatch.setenv("HF_ENDPOINT", fake.url)
        monkeypatch.setenv("MODELSCOPE_ENDPOINT", fake.url)
        monkeypatch.delenv("MODELSCOPE_DOMAIN", raising=False)
        monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))  # no token file of this machine's
        for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "MODELSCOPE_API_TOKEN", "HF_TOKEN_PATH",
                     "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
            monkeypatch.delenv(name, raising=False)
        yield fake


@pytest.fixture
def store(tmp_path):
    return ModelStore(tmp_path / "home")


def _error(action) -> MnnEngineError:
    with pytest.raises(MnnEngineError) as err:
        action()
    return err.value


def _same_bytes(store: ModelStore, model_id: str, repo: Repo) -> None:
    path = store.path(model_id)
    for name, data in repo.files.items():
        assert (path / name).read_bytes() == data, name


# ---------------------------------------------------------------- no wrong bytes in the store
def test_a_repo_listing_x_and_x_part_gets_each_its_own_bytes(hub, store, model_repo):
    weights = model_repo.files[WEIGHT]
    repo = Repo(model_repo.commit, {**model_repo.files, WEIGHT + ".part": b"not the weights" * 1000})
    hub.hf[CATALOG_REPO] = repo
    hub.faults.drop_after[WEIGHT] = len(weights) // 3  # the weights' partial exists while X.part arrives
    info = store.pull("qwen3-0.6b", workers=1, **FAST)
    _same_bytes(store, info.id, repo)
    assert not (store.root / "downloads" / f"{info.id}.partial").exists()


def test_a_listed_file_at_a_name_the_store_keeps_for_itself_is_refused(hub, store, model_repo):
    hub.hf[CATALOG_REPO] = Repo(model_repo.commit, {**model_repo.files, ".pull.json": b"{}"})
    assert _error(lambda: store.pull("qwen3-0.6b", **FAST)).code == "invalid_manifest"


def test_a_range_answer_from_another_offset_restarts_the_file(hub, store, model_repo):
    hub.faults.drop_after[WEIGHT] = 5000
    hub.faults.wrong_offset.add(WEIGHT)
    info = store.pull("qwen3-0.6b", **FAST)
    _same_bytes(store, info.id, model_repo)
    assert [r for p, r in hub.ranges if p == WEIGHT][:2] == [None, "bytes=5000-"]


def test_a_200_with_content_range_is_a_partial_answer(hub, store, model_repo):
    hub.faults.drop_after[WEIGHT] = 5000
    hub.faults.ok_with_range.add(WEIGHT)
    info = store.pull(f"modelscope:{MS_REPO}", **FAST)
    _same_bytes(store, info.id, model_repo)
    assert hub.served[WEIGHT] == len(model_repo.files[WEIGHT])  # resumed: nothing sent twice


def test_one_corrupt_body_is_fetched_again_in_the_same_run(hub, store, model_repo):
    hub.faults.corrupt_once.add(WEIGHT)
    info = store.pull("qwen3-0.6b", **FAST)
    _same_bytes(store, info.id, model_repo)
    assert hub.served[WEIGHT] == 2 * len(model_repo.files[WEIGHT])


@pytest.mark.parametrize(("spec", "model_id"), [("hf:taobao-mnn/Qwen3-0.6B-MNN@{commit}", "qwen3-0-6b-mnn"),
                                               ("qwen3-0.6b@{commit}", "qwen3-0-6b")])
def test_a_spec_names_its_revision_after_an_at(hub, store, model_repo, spec, model_id):
    info = store.pull(spec.format(commit=model_repo.commit), **FAST)
    assert info.source["revision"] == model_repo.commit and info.id == model_id
    assert _error(lambda: store.pull(f"{spec.format(commit='main')}", revision="other", update=True,
                                     **FAST)).param == "revision"
    assert _error(lambda: store.pull("hf:taobao-mnn/Qwen3-0.6B-MNN@nope", update=True, **FAST)).code == \
        "model_not_found"


# ---------------------------------------------------------------- retries
def test_429_with_retry_after_is_waited_for_on_listings_and_files(hub, store, model_repo):
    hub.faults.throttled[f"listing:{CATALOG_REPO}"] = [(429, "1"), (503, "")]
    hub.faults.throttled[WEIGHT] = [(429, "1")]
    started = time.monotonic()
    info = store.pull("qwen3-0.6b", **FAST)
    assert time.monotonic() - started >= 2  # both Retry-After waits were kept
    _same_bytes(store, info.id, model_repo)


def test_retry_after_is_bounded_and_read_as_rfc_9110_says():
    assert sources._retry_after_seconds("5") == 5.0
    assert sources._retry_after_seconds("999999") == sources.MAX_RETRY_AFTER_S
    assert sources._retry_after_seconds("Wed, 21 Oct 2015 07:28:00 GMT") == 0.0  # in the past
    assert sources._retry_after_seconds("soon") is None and sources._retry_after_seconds(None) is None


# ---------------------------------------------------------------- tokens
def test_a_gated_file_behind_a_same_host_redirect_opens_with_the_token(hub, store, monkeypatch, model_repo):
    monkeypatch.setenv("HF_TOKEN", "hf_ok")
    hub.faults.gated[CATALOG_REPO] = "hf_ok"
    hub.faults.redirect[WEIGHT] = "same"
    info = store.pull("qwen3-0.6b", **FAST)  # was 401: urllib drops the header on every redirect
    _same_bytes(store, info.id, model_repo)


def test_a_redirect_to_another_host_gets_no_token(hub, store, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_ok")
    hub.faults.gated[CATALOG_REPO] = "hf_ok"
    hub.faults.redirect[WEIGHT] = "other"
    error = _error(lambda: store.pull("qwen3-0.6b", **FAST))
    assert error.code == "pull_unauthorized"  # the other host asked for it and did not get it
    redirected = [a for p, a in zip(hub.requests, hub.auth, strict=False) if p.startswith("/redirected/")]
    assert redirected and all(a is None for a in redirected)


def test_the_hf_token_file_is_read_as_hf_auth_login_leaves_it(hub, store, monkeypatch, tmp_path, model_repo):
    hub.faults.gated[CATALOG_REPO] = "hf_from_file"
    (tmp_path / "hf-home").mkdir()
    (tmp_path / "hf-home" / "token").write_text("hf_from_file\n")
    info = store.pull("qwen3-0.6b", **FAST)
    _same_bytes(store, info.id, model_repo)
    monkeypatch.setenv("HF_TOKEN_PATH", str(tmp_path / "elsewhere"))
    assert sources.config.hub_token("hf") is None


def test_a_wrong_token_is_named_a_wrong_token(hub, store, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_typo")
    hub.faults.valid_tokens = {"hf_real"}
    error = _error(lambda: store.pull("qwen3-0.6b", **FAST))
    assert error.code == "pull_unauthorized" and "refused the token" in error.message and "HF_TOKEN" in error.message


def test_hf_hub_offline_sends_no_request(hub, store, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    error = _error(lambda: store.pull("qwen3-0.6b", **FAST))
    assert "HF_HUB_OFFLINE" in error.message and hub.requests == []


# ---------------------------------------------------------------- ModelScope as it is
def test_modelscope_endpoint_comes_first_and_domain_still_works(hub, store, monkeypatch):
    monkeypatch.setenv("MODELSCOPE_DOMAIN", "http://127.0.0.1:9")  # deprecated, and shadowed
    assert sources.config.modelscope_endpoint() == hub.url
    monkeypatch.delenv("MODELSCOPE_ENDPOINT")
    monkeypatch.setenv("MODELSCOPE_DOMAIN", hub.url)
    assert store.pull(f"modelscope:{MS_REPO}", **FAST).source["source"] == "modelscope"


def test_a_private_modelscope_repo_opens_with_the_cookie_and_without_names_the_variable(hub, store, monkeypatch):
    hub.faults.private_ms[MS_REPO] = "ms_token"
    error = _error(lambda: store.pull(f"modelscope:{MS_REPO}", **FAST))
    assert error.code == "model_not_found" and "MODELSCOPE_API_TOKEN" in error.message
    monkeypatch.setenv("MODELSCOPE_API_TOKEN", "ms_token")
    assert store.pull(f"modelscope:{MS_REPO}", **FAST).source["source"] == "modelscope"
    assert "m_session_id=ms_token" in hub.cookies


def test_a_modelscope_error_body_is_an_error_not_an_empty_model(hub, store):
    del hub.modelscope[MS_REPO]
    error = _error(lambda: store.pull(f"modelscope:{MS_REPO}", **FAST))
    assert error.code == "model_not_found" and "not an MNN model" not in error.message


def test_modelscope_update_sees_a_changed_file_though_the_branch_is_the_same(hub, store, model_repo):
    # real listings: each file carries the revision of the last commit that touched it
    revisions = {path: ("1" * 40 if i % 2 else "2" * 40) for i, path in enumerate(model_repo.files)}
    hub.modelscope[MS_REPO] = Repo("master", dict(model_repo.files), revisions)
    first = store.pull(f"modelscope:{MS_REPO}", **FAST)
    assert first.source["commit"] != "master"
    hub.served.clear()
    assert store.pull(f"modelscope:{MS_REPO}", update=True, **FAST).source["commit"] == first.source["commit"]
    assert hub.served == {}  # unchanged: nothing fetched
    changed = dict(model_repo.files)
    changed["tokenizer.mtok"] = changed["tokenizer.mtok"]  # same bytes, a new commit touched it
    hub.served.clear()
    hub.modelscope[MS_REPO] = Repo("master", changed, {**revisions, "tokenizer.mtok": "3" * 40})
    updated = store.pull(f"modelscope:{MS_REPO}", update=True, **FAST)
    assert updated.source["commit"] != first.source["commit"]
    assert hub.served["tokenizer.mtok"] == len(changed["tokenizer.mtok"])  # fetched at its new revision
    assert json.loads((store.path(updated.id) / ".source.json").read_text())["commit"] == updated.source["commit"]


# ---------------------------------------------------------------- what the user sees
def test_ctrl_c_on_a_slow_link_stops_at_once_with_one_line(hub, store, model_repo):
    import os
    import signal
    import subprocess
    import sys

    hub.faults.delay_s, hub.faults.chunk = 0.05, 4096  # a trickle: 80 KiB/s
    env = {**os.environ, "MNN_ENGINE_HOME": str(store.root)}
    child = subprocess.Popen([sys.executable, "-m", "mnn_engine", "models", "pull", "qwen3-0.6b", "--progress"],
                             cwd="/", env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while hub.served.get(WEIGHT, 0) < 64 << 10:
        assert child.poll() is None and time.monotonic() < deadline, child.communicate()
        time.sleep(0.02)
    child.send_signal(signal.SIGINT)
    started = time.monotonic()
    _, err = child.communicate(timeout=30)
    assert time.monotonic() - started < 5 and child.returncode == 130  # was 7 s (up to 35) and a traceback
    assert "Traceback" not in err and err.strip().splitlines()[-1].startswith("pull stopped: ")
    assert "kept in" in err and "pull again to resume" in err


def test_the_progress_bar_never_shows_100_early_and_ends_once():
    import io

    from mnn_engine.cli.common import progress_bar

    out = io.StringIO()
    show = progress_bar("pulling", out)
    show(0, 1000, "")
    time.sleep(0.11)
    show(996, 1000, "x")
    assert "99%" in out.getvalue() and "100%" not in out.getvalue()  # 99.6 % is not yet done
    show(1000, 1000, "")
    show(1000, 1000, "")  # the pull's own final report after the last file's
    assert out.getvalue().count("100%") == 1 and out.getvalue().endswith("\n")


def test_a_pull_reports_progress_while_no_byte_arrives(hub, store):
    hub.faults.delay_s, hub.faults.chunk = 1.5, 8 << 20  # stalls three times a report's interval
    reports = []
    store.pull("qwen3-0.6b", progress=lambda done, total, name: reports.append((time.monotonic(), done)), **FAST)
    gaps = [b[0] - a[0] for a, b in itertools.pairwise(reports)]
    assert max(gaps) < 1.2  # reported every 0.5 s through each 1.5 s stall (was: only when bytes came)


# ---------------------------------------------------------------- resumes that keep what they can
def test_a_listing_changed_between_runs_keeps_the_unchanged_files(hub, store, model_repo):
    hub.faults.missing.add("config.json")  # the first run fetches the rest, then fails
    assert _error(lambda: store.pull("qwen3-0.6b", workers=1, **FAST)).code == "model_not_found"
    assert hub.served[WEIGHT] == len(model_repo.files[WEIGHT])
    hub.faults.missing.clear()
    changed = {**model_repo.files, "README.md": b"a new commit changed only this file\n"}
    hub.hf[CATALOG_REPO] = Repo("d" * 40, changed)
    hub.served.clear()
    info = store.pull("qwen3-0.6b", **FAST)
    assert WEIGHT not in hub.served and "README.md" in hub.served  # was: every kept byte deleted
    _same_bytes(store, info.id, hub.hf[CATALOG_REPO])


def test_the_hf_file_list_is_the_paged_tree_not_the_cut_short_siblings(hub, store, model_repo):
    hub.faults.siblings_limit, hub.faults.tree_page = 1, 2  # a large repo's revision info lists a few files
    info = store.pull("qwen3-0.6b", **FAST)
    _same_bytes(store, info.id, model_repo)
    pages = [p for p in hub.requests if "/tree/" in p]
    assert len(pages) >= len(model_repo.files) // 2  # every page followed


def test_an_unreachable_hub_is_named_with_the_ways_out(hub, store, monkeypatch):
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # nothing listens there
    monkeypatch.setattr(sources, "DEFAULT_RETRY", sources.Retry(times=1, backoff=(0.01,)))
    error = _error(lambda: store.pull("qwen3-0.6b", **FAST))
    assert error.code == "pull_failed" and "127.0.0.1:9" in error.message
    assert "--source modelscope" in error.message and "HF_ENDPOINT" in error.message


# ---------------------------------------------------------------- the catalog's sizes
def test_catalog_sizes_are_the_mnn_model_markets_and_per_source():
    """Hugging Face sizes are the file_size of MNN's own model market (the
    excerpt names its commit); the three entries once 25-40 % off, and
    gemma-2-2b without its 1.2 GB embeddings file, are among them."""
    from mnn_engine.hub import catalog

    market = json.loads((Path(__file__).parents[1] / "schemas" / "mnn_model_market_sizes.json").read_text())
    by_repo = {m["HuggingFace"]: m for m in market["models"]}
    entries = catalog.entries()
    assert {e.hf for e in entries} == set(by_repo)
    for entry in entries:
        listed = by_repo[entry.hf]
        assert listed["ModelScope"] == entry.modelscope
        assert entry.size("hf") == catalog.SourceSize(listed["file_size"], True), entry.name
    gemma = catalog.find("gemma-2-2b")
    assert gemma.size("hf").bytes > 2_500_000_000  # 1.47 GB of weights and 1.18 GB of bf16 embeddings
    deepseek = catalog.find("deepseek-r1-1.5b")
    assert deepseek.size("modelscope").bytes < 0.7 * deepseek.size("hf").bytes  # the two exports differ
    assert not deepseek.size("modelscope").exact
    # where only one source's size is known, the other shows it as approximate
    assert catalog.find("gemma-2-2b").size("modelscope") == catalog.SourceSize(2673390373, False)


def test_the_catalog_listing_shows_each_sources_size(monkeypatch, capsys, tmp_path):
    from mnn_engine.cli.main import main

    monkeypatch.setenv("MNN_ENGINE_HOME", str(tmp_path))
    assert main(["models", "catalog"]) == 0
    lines = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()}
    assert "HF" in lines["NAME"] and "MODELSCOPE" in lines["NAME"]
    assert lines["deepseek-r1-1.5b"].split()[2:6] == ["1.5", "GiB", "~973.4", "MiB"]
    assert lines["qwen3-1.7b"].split()[2:6] == ["1.2", "GiB", "1.2", "GiB"]  # both exact
    assert main(["models", "catalog", "--json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows["qwen2.5-0.5b"]["sizes"]["hf"] == {"bytes": 556808791, "exact": True}


@pytest.mark.parametrize("sizes", [[1, 2], {"hf": 5}, {"hf": {"bytes": "many"}}, {"hf": {}}])
def test_a_malformed_catalog_size_is_named(monkeypatch, tmp_path, sizes):
    from mnn_engine.hub import catalog

    (tmp_path / "catalog.json").write_text(json.dumps({"models": [{"name": "m", "hf": "o/M", "sizes": sizes}]}))
    monkeypatch.setenv("MNN_ENGINE_CATALOG", str(tmp_path / "catalog.json"))
    error = _error(catalog.entries)
    assert error.code == "internal_error" and "catalog" in error.message


def test_a_catalog_of_ones_own_may_give_one_size_for_every_source(monkeypatch, tmp_path):
    from mnn_engine.hub import catalog

    model = {"name": "m", "hf": "o/M", "modelscope": "O/M", "size_bytes": 7, "size_exact": True}
    (tmp_path / "catalog.json").write_text(json.dumps({"models": [model]}))
    monkeypatch.setenv("MNN_ENGINE_CATALOG", str(tmp_path / "catalog.json"))
    (entry,) = catalog.entries()
    assert entry.size("hf") == entry.size("modelscope") == catalog.SourceSize(7, True)
