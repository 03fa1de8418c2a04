"""What an export's own record says about it: llmexport's ``export_args.json``, and the quantisation it
is known to get wrong (a block that does not divide the hidden size answers nonsense:
tools/bench/quality.py measured SmolLM2-135M with blocks of 128)."""

from __future__ import annotations

import json
import logging
import shutil

from support import test_model_dir

from mnn_engine import Llm
from mnn_engine.runtime.model_files import export_args, quantization_problem


def test_export_args_are_read_or_empty(tmp_path):
    assert export_args(tmp_path) == {}
    (tmp_path / "export_args.json").write_text("[1, 2]")
    assert export_args(tmp_path) == {}
    (tmp_path / "export_args.json").write_text("{not json")
    assert export_args(tmp_path) == {}
    (tmp_path / "export_args.json").write_text(json.dumps({"quant_bit": 4, "quant_block": 64}))
    assert export_args(tmp_path) == {"quant_bit": 4, "quant_block": 64}


def test_a_block_that_does_not_divide_the_hidden_size_is_named(tmp_path):
    (tmp_path / "export_args.json").write_text(json.dumps({"quant_block": 128, "lm_quant_block": 64}))
    problem = quantization_problem(tmp_path, {"hidden_size": 576})
    assert problem and "quant_block 128" in problem and "576" in problem
    assert quantization_problem(tmp_path, {"hidden_size": 1024}) is None
    assert quantization_problem(tmp_path, {}) is None  # no hidden size: nothing to say
    (tmp_path / "export_args.json").write_text(json.dumps({"quant_block": 0, "lm_quant_block": 128}))
    assert "lm_quant_block 128" in quantization_problem(tmp_path, {"hidden_size": 576})


def test_loading_such_an_export_warns(tmp_path, caplog):
    model = tmp_path / "tiny"
    shutil.copytree(test_model_dir("tiny"), model)
    args = export_args(model)
    assert args.get("quant_block") == 64  # the test model's own record: no warning for it
    (model / "export_args.json").write_text(json.dumps({**args, "quant_block": 96}))  # hidden 128
    with caplog.at_level(logging.WARNING, logger="mnn_engine.llm"), Llm(str(model), use_mmap=False):
        pass
    assert any("does not divide its hidden size 128" in r.getMessage() for r in caplog.records)
