"""The user-facing bench command: options and output formats (no timing asserts)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import asdict

from hypothesis import given
from hypothesis import strategies as st
from support import MNN_BATCH_EXACT, test_model_dir

from mnn_engine import Engine, LoadOptions, ModelStore
from mnn_engine.cli.bench import (
    TUNE_MARGIN,
    bench,
    format_report,
    option_candidates,
    percentile,
    pick_best,
    thread_candidates,
)


def run_cli(home, *args):
    env = dict(os.environ, MNN_ENGINE_HOME=str(home))
    return subprocess.run([sys.executable, "-m", "mnn_engine", "bench", *args], capture_output=True, text=True,
                          env=env, timeout=600, cwd="/")


@given(st.lists(st.floats(min_value=0, max_value=1e6), min_size=1, max_size=30))
def test_percentiles(values):
    p50, p90, p99 = (percentile(values, q) for q in (50, 90, 99))
    assert min(values) <= p50 <= p90 <= p99 <= max(values)
    assert percentile(values, 0) == min(values) and percentile(values, 100) == max(values)


def test_bench_json_report(tmp_path):
    result = run_cli(tmp_path, str(test_model_dir("tiny")), "--json", "--runs", "3", "--gen", "16",
                     "--prompt-len", "40", "--threads", "1")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["options"]["threads"] == 1 and report["prompt_len"] == 40 and report["gen"] == 16
    assert len(report["samples"]) == 3
    assert all(s["completion_tokens"] == 16 for s in report["samples"])  # end tokens ignored
    for metric in ("prefill_tokens_per_second", "decode_tokens_per_second", "time_to_first_token_ms"):
        stats = report["stats"][metric]
        assert 0 < stats["p50"] <= stats["p90"] <= stats["p99"]
    assert report["load_seconds"] > 0 and report["warmup_seconds"] > 0 and report["peak_rss_mib"] > 10


def test_bench_table(tmp_path):
    result = run_cli(tmp_path, str(test_model_dir("tiny")), "--runs", "2", "--gen", "8", "--prompt-len", "16",
                     "--threads", "2", "--precision", "high")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert "threads 2" in lines[0] and "precision high" in lines[0] and "gen 8" in lines[0]
    assert lines[1].startswith("load ") and "peak RSS" in lines[1]
    assert lines[2].split() == ["p50", "p90", "p99"]
    assert [line.split()[0] for line in lines[3:]] == ["prefill", "decode", "time"]
    assert "run 2/2" in result.stderr


def test_bench_rejects_bad_options(tmp_path):
    for args, code in ((["--runs", "0"], "invalid_argument"), (["--gen", "1"], "invalid_argument"),
                       (["--threads", "9"], "invalid_argument"), (["--backend", "vulkan"], "backend_unavailable")):
        result = run_cli(tmp_path, str(test_model_dir("tiny")), *args)
        assert result.returncode == 2 and f"[{code}]" in result.stderr, (args, result.stderr)
    missing = run_cli(tmp_path, "no-such-model")
    assert missing.returncode == 2 and "[model_not_found]" in missing.stderr


def test_tune_tries_threads_then_options_at_the_best_count():
    assert [c.threads for c in thread_candidates(LoadOptions(), cpu_count=4)] == [1, 2, 3, 4]
    assert [c.threads for c in thread_candidates(LoadOptions(), cpu_count=64)] == [1, 2, 3, 4, 6, 8]
    options = option_candidates(LoadOptions(threads=3))
    assert all(c.threads == 3 for c in options) and LoadOptions(threads=3) not in options
    assert {c.quant_qkv for c in options} == {None, 1, 2}
    assert any(c.precision == "high" for c in options) and any(c.dynamic_option == 8 for c in options)
    assert any(not c.use_mmap for c in options)
    assert len(options) == len(set(options))
    exact = option_candidates(LoadOptions(threads=3), exact=True)
    assert exact == [c for c in options if c.quant_qkv is None]


@given(st.lists(st.floats(min_value=1, max_value=100), min_size=1, max_size=12))
def test_pick_best_prefers_earlier_rows_within_the_margin(decodes):
    table = [{"decode_p50": d} for d in decodes]
    best = pick_best(table)
    assert best["decode_p50"] * TUNE_MARGIN >= max(decodes)  # never far from the fastest
    earlier = table[:table.index(best)]
    assert all(best["decode_p50"] > row["decode_p50"] for row in earlier)  # replaced only by a faster row


def test_pick_best_ignores_noise_sized_wins():
    table = [{"decode_p50": 50.0}, {"decode_p50": 51.0}, {"decode_p50": 56.0}, {"decode_p50": 56.5}]
    assert pick_best(table) is table[2]


def test_tune_saves_a_preset_that_load_uses(tmp_path):
    store = ModelStore(tmp_path / "home")
    store.import_model(test_model_dir("tiny"), model_id="tiny")
    result = run_cli(tmp_path / "home", "tiny", "--tune", "--json", "--runs", "1", "--gen", "8",
                     "--prompt-len", "16")
    assert result.returncode == 0, result.stderr
    tuned = json.loads(result.stdout)
    assert len(tuned["table"]) >= 3 and tuned["best"] in tuned["table"]
    assert store.preset("tiny") == tuned["best"]["options"]
    engine = Engine(store)
    try:
        loaded = engine.load("tiny")
        assert loaded["options"] == tuned["best"]["options"]
        exact = engine.load("tiny", LoadOptions(threads=1))  # told otherwise
        assert exact["options"] == asdict(LoadOptions(threads=1))
    finally:
        engine.close()
    store.delete("tiny")
    assert store.preset("tiny") is None


def test_tune_table(tmp_path):
    ModelStore(tmp_path / "home").import_model(test_model_dir("tiny"), model_id="tiny")
    result = run_cli(tmp_path / "home", "tiny", "--tune", "--runs", "1", "--gen", "4", "--prompt-len", "8")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["options", "decode", "tok/s", "prefill", "tok/s", "load", "s"]
    rows = [line for line in lines[1:] if line.startswith("cpu ")]
    assert len(rows) == len(thread_candidates(LoadOptions(), os.cpu_count() or 1)) + 5
    assert sum("<- best" in row for row in rows) == 1
    assert any("quant_qkv 1" in row for row in rows) and "outputs differ slightly" in result.stdout
    assert lines[-1].startswith("saved preset: ") and "trying cpu" in result.stderr
    exact = run_cli(tmp_path / "home", "tiny", "--tune", "--exact", "--runs", "1", "--gen", "4", "--prompt-len", "8")
    assert exact.returncode == 0, exact.stderr
    assert "quant_qkv" not in exact.stdout and len(exact.stdout.splitlines()) == len(lines) - 3


def test_flags_given_are_layered_on_the_preset(tmp_path):
    store = ModelStore(tmp_path / "home")
    store.import_model(test_model_dir("tiny"), model_id="tiny")
    preset = asdict(LoadOptions(threads=1, quant_qkv=2, dynamic_option=8))
    store.save_preset("tiny", preset, {"decode_p50": 1.0})
    result = run_cli(tmp_path / "home", "tiny", "--json", "--runs", "1", "--gen", "4", "--prompt-len", "8",
                     "--threads", "2", "--kv-quant", "1")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["options"] == {**preset, "threads": 2, "quant_qkv": 1}
    engine = Engine(store)
    try:
        assert engine.load("tiny")["options"] == preset
        assert engine.load("tiny", precision="high")["options"] == {**preset, "precision": "high"}
    finally:
        engine.close()


def test_bench_api_directly(tmp_path):
    report = bench(str(test_model_dir("tiny")), LoadOptions(threads=1), prompt_len=8, gen=4, runs=1,
                   store=ModelStore(tmp_path))
    assert report["samples"][0]["completion_tokens"] == 4
    assert report["speculative"] == ("ngram" if MNN_BATCH_EXACT else "off")  # auto: on where exact


def test_bench_runs_with_every_load_option(tmp_path):
    """Every option reaches the model bench loads: --speculative off once ran speculative decode."""
    report = bench(str(test_model_dir("tiny")), LoadOptions(threads=1, speculative="off"), prompt_len=8, gen=4,
                   runs=1, store=ModelStore(tmp_path))
    assert report["speculative"] == "off" and report["options"]["speculative"] == "off"
    assert "decode tok/s (speculative)" not in format_report(report)
    options = LoadOptions(speculative="ngram", draft_tokens=3, prompt_cache=False, threads=1)
    arguments = options.llm_arguments(tmp_path)
    assert {k: arguments[k] for k in ("speculative", "draft_tokens", "prompt_cache")} == {
        "speculative": "ngram", "draft_tokens": 3, "prompt_cache": False}
    assert options.mnn_config(tmp_path).items() <= arguments.items()
