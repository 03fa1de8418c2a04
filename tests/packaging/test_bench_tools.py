"""The benchmark suite's helpers and its report writer (tools/bench), on recorded results."""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
from pathlib import Path

import numpy as np
from hypothesis import given
from hypothesis import strategies as st
from support import MNN_BATCH_EXACT, test_model_dir

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tools" / "bench"))

import ceiling  # noqa: E402
import common  # noqa: E402
import decode_profile as perf_profile  # noqa: E402
import report  # noqa: E402
import switch_cost  # noqa: E402

PERF_REPORT = """\
# Samples: 8K of event 'cpu-clock'
#
    52.97%  [.] _AVX_MNNGemmInt8AddBiasScale_16x4_w4                                 -      -
    12.46%  [k] __schedule
     4.58%  [.] _AVX_MNNPackedMatMulRemainFMA
     2.64%  [k] do_sched_yield
     1.13%  [.] MNNDynamicUpdateConvBiasScale
     0.85%  [.] MNNQuantAttentionKey
     0.61%  [.] __pyx_f_4_mnn_8_Sampler_argmax
     0.47%  [.] _AVX_MNNNorm
"""


def test_profile_groups_symbols_into_kernel_families():
    shares = perf_profile.group(PERF_REPORT)
    by_start = {name.split(" (")[0]: value for name, value in shares.items()}
    assert round(by_start["int4 weight matmuls"], 2) == 54.10
    assert round(by_start["attention"], 2) == 5.43
    assert round(by_start["thread pool hand-offs"], 2) == 15.10
    assert round(by_start["our loop"], 2) == 0.61
    assert round(by_start["other"], 2) == 0.47


# perf script -F pid,tid,ip,sym lines copied verbatim from one recording of a 2-thread decode on the Zen 4 VM
# (2026-12-07): 13646 ran generate (13689 is its pool thread); 13648 is the ninja the editable install's import runs
PERF_SCRIPT = """\
13646/13646      7fdd6117236e _AVX512_MNNGemmInt8AddBiasScale_16x4_w4_Unit_VNNI_Hinted<true>
13646/13689      7fdd61172362 _AVX512_MNNGemmInt8AddBiasScale_16x4_w4_Unit_VNNI_Hinted<true>
13646/13646      7fdd61237b58 MNN::ThreadPool::enqueueInternal
13646/13689      7fdd61236e18 std::thread::_State_impl<std::thread::_Invoker<std::tuple<MNN::ThreadPool::ThreadPool(int)::{lambda()#1}> > >::_M_run
13646/13646      7fdd611723b6 _AVX512_MNNGemmInt8AddBiasScale_16x4_w4_Unit_VNNI_Hinted<true>
13648/13648      560608685689 [unknown]
13646/13646  ffffffff82243b17 exc_page_fault
"""  # noqa: E501 (the lines as perf prints them)


def test_calling_thread_ms_counts_only_the_thread_that_runs_generate():
    # 4 samples of the calling thread; the pool thread's and the other process's main thread's left out;
    # 50 tok/s is 20 ms a token
    ms = perf_profile.calling_thread_ms(PERF_SCRIPT, 50.0)
    by_start = {name.split(" (")[0]: value for name, value in ms.items()}
    assert by_start["int4 weight matmuls"] == 10.0
    assert by_start["thread pool hand-offs"] == 5.0
    assert by_start["other"] == 5.0
    assert abs(sum(ms.values()) - 20.0) < 1e-9
    assert all(value == 0.0 for value in perf_profile.calling_thread_ms("", 50.0).values())


def test_profile_lines_keep_only_the_symbol():
    match = perf_profile.LINE.match("    52.97%  [.] MNN::CPUAttention::onExecute(int) const        -      -   ")
    assert match and match.groups() == ("52.97", "MNN::CPUAttention::onExecute(int) const")


@given(st.lists(st.floats(min_value=0.1, max_value=1e4), min_size=1, max_size=20))
def test_paired_ratio_of_a_series_with_itself_is_one(values):
    assert common.paired_ratio(values, values) == 1.0
    assert abs(common.paired_ratio([2 * v for v in values], values) - 2.0) < 1e-12


@given(st.integers(min_value=0, max_value=9), st.lists(st.text(max_size=3), min_size=1, max_size=4, unique=True))
def test_alternating_runs_each_name_once_a_round_and_swaps_who_goes_first(rounds, names):
    order = list(common.alternating(rounds, names))
    rounds_run = [order[i:i + len(names)] for i in range(0, len(order), len(names))]
    assert rounds_run == [names if r % 2 == 0 else names[::-1] for r in range(rounds)]


def test_libmnn_env_puts_the_library_first_and_keeps_the_rest(monkeypatch):
    monkeypatch.setenv("LD_LIBRARY_PATH", "/opt/other")
    assert common.libmnn_env("/x/lib")["LD_LIBRARY_PATH"] == "/x/lib:/opt/other"
    assert common.libmnn_env(None)["LD_LIBRARY_PATH"] == "/opt/other"
    monkeypatch.delenv("LD_LIBRARY_PATH")
    assert common.libmnn_env("/x/lib")["LD_LIBRARY_PATH"] == "/x/lib"
    assert "LD_LIBRARY_PATH" not in common.libmnn_env(None)


def test_report_renders_every_section_from_the_recorded_results(tmp_path, monkeypatch):
    out = tmp_path / "benchmarks.md"
    monkeypatch.setattr(sys, "argv", ["report.py", "--results", str(REPO / "bench-results"), "--out", str(out)])
    report.main()
    text = out.read_text()
    for heading in ("## Targets", "## Our generation loop", "## HTTP streaming", "## Memory", "## Bandwidth ceiling",
                    "## Peers", "## Load time", "## KV-cache quantisation",
                    "## Where decode time goes", "## Conversations", "## Prompt cache: where", "## Default threads",
                    "## Structured output", "## Speculative decoding", "## The batch-exactness patch",
                    "## A lone row's float GEMM", "## The AVX-512 VNNI int8 GEMMs",
                    "## The vector input sums: what patch 0005 saves",
                    "## The thread pool's waits: what patch 0007 saves",
                    "## The int4 kernels' weight prefetch: what patch 0008 saves",
                    "## Decode's attention reading each KV head once: what patch 0009 saves",
                    "## The float few-row kernels' prefetch: what patch 0010 saves",
                    "## A prefill's serial steps on all threads: what patch 0011 saves",
                    "## The int4 kernel's prefetch into L2 on AMD: what patch 0012 saves",
                    "## The float few-row kernels' prefetch into L2 on AMD: what patch 0013 saves",
                    "## The int8 GEMMs' input sums",
                    "## MNN's AVX-512 kernels against its AVX2 kernels", "## Long answers: the KV cache's growth",
                    "## Prefill chunk size", "## Memory of the phone's path", "## Quality of the exports"):
        assert heading in text, heading
    assert "(not measured in this run)" not in text
    # where ceiling.py and peers.py ran on the same kind of CPU, each engine's decode against its own ceiling
    assert "| share of its ceiling |" in text and "| qwen3-0.6b-shape | 2 | llama.cpp Q4_0 |" in text
    # and how much a second thread gave each engine against how much it gave the read bandwidth (the Zen 4 run)
    assert ("From one thread to two, read bandwidth grew 1.10x here and plain decode grew: qwen3-0.6b-shape "
            "mnn no-spec 1.18x, llama.cpp Q4_0 1.48x;") in text
    # the 2-core read bandwidth by where the host put the cores (ceiling.py from 2026-12-07 on)
    assert "One thread per core by where the host put the cores: " in text
    # the calling thread's milliseconds per token (decode_profile.py from 2026-12-07 on)
    assert "| threads | KV cache | ms per token |" in text
    assert "| defaults: decode mnn / llama.cpp Q4_0 >= 1.3" in text
    assert "| defaults: prefill mnn / llama.cpp Q4_0 >= 1.5" in text
    # one row per kind of CPU the patch's cost was measured on
    assert "| smollm2-135m on AMD EPYC (AVX-512) (2026-" in text
    assert "| smollm2-135m on AMD EPYC (AVX2, no AVX-512) (2026-12-03): prefill with patch 0002 within 2 % of" in text
    assert ("| qwen3-0.6b-shape on AMD EPYC (AVX-512), AVX2 kernels (AVX-512 compiled out of libMNN) (2026-"
            in text)
    # a run that recorded its rounds shows their middle half beside the median (the Zen 4's AVX2 kernels' run)
    assert re.search(r"\| qwen3-0\.6b-shape on AMD EPYC \(AVX-512\), family 25 model 17, AVX2 kernels \(AVX-512 "
                     r"compiled out of libMNN\) \(2026-12-07\): prefill with patch 0002 within 2 % of without \| "
                     r"\d\.\d{3}x \(\d\.\d\d-\d\.\d\d\) \|", text)
    # patch 0002's switch alone, one library in one process (switch_cost.py from 2026-12-07 on)
    assert re.search(r"\| AMD EPYC \(AVX-512\), family 25 model 17, AVX2 kernels \(AVX-512 compiled out of libMNN\) "
                     r"\(2026-12-07\) \| qwen3-0\.6b-shape \| 24 \| [\d.]+ / [\d.]+ \| "
                     r"\d\.\d{3}x \(\d\.\d\d-\d\.\d\d\) \| \d+ / \d+ \| \d\.\d{3}x \(\d\.\d\d-\d\.\d\d\) \| "
                     r"True / False \| 1 / 1 \|", text)
    assert re.search(r"compiled out of libMNN\), prefill only \(2026-12-07\) \| qwen3-0\.6b-shape \| 100 \| - \| - \| "
                     r"\d+ / \d+ \| \d\.\d{3}x \(\d\.\d\d-\d\.\d\d\) \| True / False \| - \|", text)
    # the same on 1 thread (2026-12-08), where the two cores' placement plays no part: the libraries, and the switch
    assert re.search(r"compiled out of libMNN\), 1 thread \(2026-12-08\): prefill with patch 0002 within 2 % of "
                     r"without \| \d\.\d{3}x \(\d\.\d\d-\d\.\d\d\) \|", text)
    assert re.search(r"compiled out of libMNN\), 1 thread, prefill only \(2026-12-08\) \| smollm2-135m \| 100 \| - \| "
                     r"- \| \d+ / \d+ \| \d\.\d{3}x", text)
    # how far the recorded rounds ran, from the results themselves
    kept = json.loads((REPO / "bench-results" / "patch_cost.json").read_text())["by_cpu"].values()
    ratios = [x for run in kept for row in run["models"].values() for key in ("decode_tps", "prefill_tps")
              for x in row[key].get("per_round", [])]
    assert f"The recorded rounds' ratios ran from {min(ratios):.2f}x to {max(ratios):.2f}x:" in text
    assert "decode without speculation >= 1.4x |" in text  # issue #47's, from the peers run
    # peers.py --without-patch 0002 (the Zen 4 run of 2026-12-07): before the patch, in the same run
    assert "mnn no-spec without 0002: mnn no-spec's engine and settings with libMNN built without patch 0002" in text
    assert "| **mnn no-spec / mnn no-spec without 0002** |" in text


def test_report_reads_older_peer_results(tmp_path):
    results = tmp_path / "results"
    shutil.copytree(REPO / "bench-results", results)
    kept = json.loads((results / "peers.json").read_text())
    run = next(iter(kept["by_cpu"].values()))  # one run alone, as files held it before
    for row in run["rows"]:  # the layout before per-peer ratios: one peer, one ratio set
        row["medians"] = {e: m for e, m in row["medians"].items() if e in ("mnn", "llama.cpp Q4_0", "llama.cpp Q4_1")}
        peer = next(e for e in row["medians"] if e != "mnn")
        row["ratios_mnn_over_peer"] = row.pop("ratios")[f"mnn / {peer}"]
        row.pop("by_placement", None)  # recorded since the core hand-off probe
    (results / "peers.json").write_text(json.dumps(run))
    (results / "load.json").unlink()  # older runs had no load benchmark: load time came from the peers
    lines = report.targets_section(results)
    assert any(line.startswith("| defaults: decode mnn / llama.cpp Q4_0 >= 1.3") for line in lines)
    assert any(line.startswith("| warm load <= llama.cpp") for line in lines)


def test_runs_are_kept_by_kind_of_cpu(tmp_path, monkeypatch):
    """A run replaces the last one of its CPU kind only (model name, family and model: a Zen 4 and a
    Zen 5 EPYC share the name); a file of one run, as peers.json was, becomes the first kind kept."""
    monkeypatch.setattr(common, "RESULTS", tmp_path)
    zen4 = {"cpu": "AMD EPYC (AVX-512)", "cpu_id": "family 25 model 17", "date": "2026-12-06"}
    (tmp_path / "peers.json").write_text(json.dumps({"machine": zen4, "rows": ["zen 4"]}))
    intel = {"cpu": "Intel(R) Xeon(R) Processor (AVX-512)", "cpu_id": "family 6 model 167", "date": "2026-12-07"}
    zen5 = {**zen4, "cpu_id": "family 26 model 2"}
    for info, rows in ((intel, ["intel"]), (zen5, ["zen 5"]), ({**intel, "date": "2026-12-08"}, ["intel again"])):
        common.save_by_cpu("peers", {"machine": info, "rows": rows}, common.cpu_kind(info))
    runs = report.runs_by_cpu(json.loads((tmp_path / "peers.json").read_text()))
    assert {kind: run["rows"] for kind, run in runs.items()} == {
        "AMD EPYC (AVX-512), family 25 model 17": ["zen 4"],
        "Intel(R) Xeon(R) Processor (AVX-512), family 6 model 167": ["intel again"],
        "AMD EPYC (AVX-512), family 26 model 2": ["zen 5"]}
    assert report.runs_by_cpu({"machine": {"cpu": "AMD EPYC (AVX-512)"}, "rows": []}).keys() == {"AMD EPYC (AVX-512)"}


def test_core_handoff_probe_reads_where_the_two_cores_are():
    # the real probe (tools/bench/core_handoff.c), compiled and run as peers.py runs it before each measurement
    handoff = common.core_handoff_ns()
    if (os.cpu_count() or 1) < 2:
        assert handoff is None
        return
    assert handoff is not None and 0 < handoff < 100_000
    assert common.placement(handoff) in ("near", "far")
    assert [common.placement(v) for v in (None, 50.0, 370.0)] == ["unknown", "near", "far"]
    # a measurement counts for a placement only where the readings before and after it agree
    readings = ([50.0, 60.0], [50.0, 370.0], [400.0, 380.0], [None, None], [None, 50.0])
    assert [common.agreed_placement(pair) for pair in readings] == ["near", "moved", "far", "unknown", "moved"]
    # ceiling.py's bandwidth per placement, on a small buffer: only placements the probe agreed on, real readings
    seen = ceiling.bandwidth_by_cores(np.ones(1 << 21, dtype=np.int64), 2, 3)
    assert set(seen) <= {"near", "far"} and all(bandwidth > 1e8 for bandwidth in seen.values())


def test_peers_targets_judge_each_placement_from_its_own_samples():
    def ratios(decode: float, prefill: float) -> dict[str, dict[str, float]]:
        return {"mnn no-spec / llama.cpp Q4_0": {"load_s": 0.3, "prefill_tps": prefill, "decode_tps": decode}}

    runs = {"mnn no-spec": 3, "llama.cpp Q4_0": 2}
    row = {"model": "qwen3-0.6b-shape", "threads": 2, "ratios": ratios(1.35, 1.68),
           "by_placement": {"near": {"samples": runs, "ratios": ratios(1.16, 1.73)},
                            "far": {"samples": runs, "ratios": ratios(1.56, 1.62)}}}
    rows = report.peers_targets({"machine": {"cpu": "AMD EPYC (AVX-512)"}, "rows": [row]})
    met = {name.split("2 thread(s), AMD EPYC (AVX-512)")[1]: (value, ok) for name, value, ok in rows}
    assert met[": decode without speculation >= 1.4x"] == ("1.35x", False)
    assert met[", cores sharing a cache (3 + 2 runs): decode without speculation >= 1.4x"] == ("1.16x", False)
    assert met[", cores sharing no cache (3 + 2 runs): decode without speculation >= 1.4x"] == ("1.56x", True)
    assert met[", cores sharing a cache (3 + 2 runs): prefill >= 1.7x"] == ("1.73x", True)
    assert met[": warm load time <= llama.cpp's"] == ("0.30x", True)


def test_switch_cost_runs_both_loads_in_one_process_on_the_real_engine():
    """switch_cost.py's worker on the tiny model: the load with the switch and the one without, every round,
    each giving one greedy answer; only the first claims exact rows, and only where this MNN has patch 0002.
    A prefill-only run (gen 0) decodes nothing and its row has no decode."""
    runs = switch_cost.measure(str(test_model_dir("tiny")), gen=8, prompt=64, threads=2, rounds=3, libdir=None)
    assert runs["on"]["batch_exact"] is MNN_BATCH_EXACT and runs["off"]["batch_exact"] is False
    row = switch_cost.summarise(runs)
    for key in ("decode_tps", "prefill_tps"):
        on, off = runs["on"][key], runs["off"][key]
        assert len(on) == len(off) == 3 and min(on + off) > 0
        ratios = [on[i] / off[i] for i in range(3)]
        assert row[key]["per_round"] == ratios and row[key]["ratio"] == sorted(ratios)[1]
        assert row[key]["on"] == sorted(on)[1] and row[key]["off"] == sorted(off)[1]
    assert row["answers"] == {"on": 1, "off": 1}
    prefill_only = switch_cost.measure(str(test_model_dir("tiny")), gen=0, prompt=64, threads=2, rounds=2,
                                       libdir=None)
    assert prefill_only["on"]["decode_tps"] == prefill_only["off"]["decode_tps"] == []
    assert len(prefill_only["on"]["prefill_tps"]) == 2
    assert "decode_tps" not in switch_cost.summarise(prefill_only)


def test_threads_named_only_an_unusual_count():
    assert common.threads_named(2) == ""
    assert common.threads_named(1) == ", 1 thread" and common.threads_named(4) == ", 4 threads"


def test_run_worker_runs_in_a_fresh_process_from_the_root_and_reads_its_last_line():
    code = "import json, os, sys; print('noise'); print(json.dumps({'cwd': os.getcwd(), 'args': sys.argv[1:]}))"
    assert common.run_worker(code, 1, "two") == {"cwd": "/", "args": ["1", "two"]}
