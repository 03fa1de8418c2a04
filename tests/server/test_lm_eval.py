"""EleutherAI's lm-eval (the real harness, ``local-completions``, its remote
tokenizer found by ``tokenizer_backend=auto``) over a served model: a
multiple-choice, a loglikelihood and a generate_until task written here
(no downloads), with ``batch_size`` 1 and 4. The harness's accuracy equals
the one the Python API's scoring gives for the same token ids."""

from __future__ import annotations

import json
import math

import pytest
from live_server import server_fixture

pytest.importorskip("lm_eval")

scripted = server_fixture("tiny-scripted")

CAPITALS = [("France", "Paris", ["Paris", "Rome", "Berlin"]), ("Italy", "Rome", ["Madrid", "Rome", "Oslo"]),
            ("Norway", "Oslo", ["Oslo", "Lima", "Cairo"]), ("Egypt", "Cairo", ["Athens", "Cairo", "Paris"]),
            ("Peru", "Lima", ["Lima", "Quito", "Rome"])]


def _tasks(folder) -> list[str]:
    """Three tasks over one local JSON file, as lm-eval's YAML describes them."""
    data = folder / "capitals.jsonl"
    data.write_text("".join(json.dumps({"country": c, "answer": choices.index(a), "choices": choices,
                                        "capital": a}) + "\n" for c, a, choices in CAPITALS))
    common = (f"dataset_path: json\ndataset_kwargs:\n  data_files:\n    test: {data}\ntest_split: test\n"
              "doc_to_text: \"The capital of {{country}} is\"\n")
    (folder / "mc.yaml").write_text(
        f"task: mnn_capitals_mc\n{common}output_type: multiple_choice\ndoc_to_choice: \"{{{{choices}}}}\"\n"
        "doc_to_target: answer\nmetric_list:\n  - metric: acc\n")
    (folder / "ll.yaml").write_text(
        f"task: mnn_capitals_ll\n{common}output_type: loglikelihood\ndoc_to_target: \" {{{{capital}}}}\"\n"
        "metric_list:\n  - metric: perplexity\n  - metric: acc\n")
    (folder / "gen.yaml").write_text(
        f"task: mnn_capitals_gen\n{common}output_type: generate_until\ndoc_to_target: \" {{{{capital}}}}\"\n"
        "generation_kwargs:\n  until: [\"\\n\"]\n  max_gen_toks: 12\n  do_sample: false\n"
        "metric_list:\n  - metric: exact_match\n")
    return ["mnn_capitals_mc", "mnn_capitals_ll", "mnn_capitals_gen"]


def _expected_mc_accuracy(llm) -> float:
    """lm-eval's multiple-choice rule, on the Python API: the choice whose tokens (after " ") are likeliest."""
    right = 0
    for country, capital, choices in CAPITALS:
        context = llm.tokenize(f"The capital of {country} is")
        sums = [math.fsum(llm.score(context, llm.tokenize(" " + c)).logprobs) for c in choices]
        right += choices[sums.index(max(sums))] == capital
    return right / len(CAPITALS)


@pytest.mark.slow
@pytest.mark.parametrize("batch_size", [1, 4])
def test_lm_eval_runs_every_kind_of_task_against_the_server(scripted, tmp_path, monkeypatch, batch_size):
    from lm_eval import simple_evaluate
    from lm_eval.tasks import TaskManager

    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    tasks = _tasks(tmp_path)
    results = simple_evaluate(
        model="local-completions", tasks=tasks, task_manager=TaskManager(include_path=str(tmp_path)),
        model_args={"base_url": scripted.url + "/v1/completions", "model": "tiny-scripted", "max_retries": 1,
                    "tokenizer_backend": "auto"},
        batch_size=batch_size, log_samples=False)["results"]
    assert results["mnn_capitals_mc"]["acc,none"] == _expected_mc_accuracy(scripted.engine.llm)
    assert math.isfinite(results["mnn_capitals_ll"]["perplexity,none"])
    assert 0 <= results["mnn_capitals_ll"]["acc,none"] <= 1
    assert results["mnn_capitals_gen"]["exact_match,none"] == 0  # the scripted model says its one sentence


@pytest.mark.slow
def test_the_readmes_lm_eval_command_runs(scripted, tmp_path):
    """The README's command line, as written, with the task swapped for a local one (arc_easy downloads)."""
    import os
    import re
    import shlex
    import subprocess
    import sys
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    [line] = [line for block in re.findall(r"```bash\n(.*?)```", readme, re.S) for line in block.splitlines()
              if line.startswith("lm_eval ")]
    _tasks(tmp_path)
    argv = [a.replace("http://localhost:8081", scripted.url).replace("qwen3-0-6b", "tiny-scripted")
            .replace("arc_easy", "mnn_capitals_mc") for a in shlex.split(line)]
    lm_eval = Path(sys.executable).with_name("lm_eval")
    done = subprocess.run([str(lm_eval), *argv[1:], "--include_path", str(tmp_path)], capture_output=True,
                          text=True, timeout=600, env=dict(os.environ, HF_DATASETS_OFFLINE="1", HF_HUB_OFFLINE="1"))
    assert done.returncode == 0, done.stderr[-2000:]
    assert "mnn_capitals_mc" in done.stdout and "acc" in done.stdout
