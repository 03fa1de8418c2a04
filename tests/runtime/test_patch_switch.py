"""Patch 0002 is a switch, off by default in libMNN: MNN's config key
``batch_independent_rows`` (``Interpreter::CPU_BATCH_INDEPENDENT_ROWS``).

Off, the patched libMNN computes exactly what upstream MNN 3.6.1 computes
(every other program linking the distribution's libMNN gets upstream's
results): the logits of every batch shape are compared, bit for bit, with a
build of the same sources and options without the patch
(``tools/mnn/build_unpatched.sh 0002``, which CI builds; the extension is
pointed at it with ``LD_LIBRARY_PATH``, which overrides its RUNPATH). On, as
mnn-engine loads every model, the rows are batch-independent
(tests/runtime/test_batch_exactness.py) and ``Llm.batch_exact`` says so.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from support import MNN_BATCH_EXACT, MNN_PATCHED, REPO, test_model_dir

from mnn_engine import Llm, build_info
from mnn_engine.runtime.llm import BATCH_INDEPENDENT_ROWS

UNPATCHED = Path(os.environ.get("MNN_ENGINE_UNPATCHED_LIBMNN", REPO / "build" / "unpatched-0002" / "lib"))

# The worker: logits (sha256 of the float32 bytes) of rows computed in several
# batch shapes after a prompt, and a greedy answer's tokens and log-probabilities.
WORKER = r"""
import hashlib, json, sys
from mnn_engine import Llm, _mnn
model, memory, switch = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
config = {} if switch is None else {"batch_independent_rows": switch}
with Llm(model, thread_num=2, speculative="off", prompt_cache=False, use_mmap=False, memory=memory, **config) as llm:
    ids = llm.tokenize("The history of the sea is long and full of storms, ships, and sailors. " * 6)
    prompt, tail = ids[:12], ids[12:36]
    rows = {}
    for name, cuts in {"alone": [[t] for t in tail], "pairs": [tail[i:i + 2] for i in range(0, 24, 2)],
                       "mixed": [tail[:1], tail[1:8], tail[8:9], tail[9:]], "whole": [tail]}.items():
        rows[name] = hashlib.sha256(_mnn.forward_rows(llm._core, prompt, cuts)).hexdigest()
    answer = llm.generate("Once upon a time", temperature=0, max_tokens=12, logprobs=True)
    print(json.dumps({"rows": rows, "tokens": list(answer.token_ids),
                      "logprobs": [t.logprob for t in answer.logprobs], "batch_exact": llm.batch_exact}))
"""


def _run(model: str, memory: str, switch: bool | None, libdir: Path | None = None) -> dict:
    env = dict(os.environ)
    if libdir is not None:
        env["LD_LIBRARY_PATH"] = f"{libdir}:{env['LD_LIBRARY_PATH']}" if env.get("LD_LIBRARY_PATH") else str(libdir)
    out = subprocess.run([sys.executable, "-c", WORKER, str(test_model_dir(model)), memory, json.dumps(switch)],
                         env=env, cwd="/", capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_the_switch_off_makes_no_claim():
    """Off, even our patched MNN is upstream's (a lone row quantised with
    upstream's single-row scheme), so the load-time check says False; every
    load asks for it on unless told otherwise."""
    with Llm(test_model_dir("tiny"), thread_num=2, **{BATCH_INDEPENDENT_ROWS: False}) as llm:
        assert llm.batch_exact is False
        assert llm.speculative_default == "off"
    with Llm(test_model_dir("tiny"), thread_num=2) as llm:
        if MNN_BATCH_EXACT:  # where the patch is claimed, the default load turns the switch on
            assert llm.batch_exact
        if not MNN_PATCHED:
            assert llm.batch_exact is False


@pytest.mark.skipif(build_info()["mode"] == "wheel", reason="the PyPI wheel's MNN has no such switch")
@pytest.mark.skipif(not (UNPATCHED / "libMNN.so").is_file(),
                    reason=f"needs the unpatched libMNN at {UNPATCHED} (tools/mnn/build_unpatched.sh 0002; CI "
                           "builds it)")
@pytest.mark.parametrize("memory", ["low", "normal"])
@pytest.mark.parametrize("model", ["tiny", "smollm2-135m"])
def test_the_switch_off_computes_what_unpatched_mnn_computes(model, memory):
    upstream = _run(model, memory, None, libdir=UNPATCHED)
    assert upstream["batch_exact"] is False
    off = _run(model, memory, False)
    assert off == upstream  # every batch shape's logits, the greedy tokens and log-probabilities
    on = _run(model, memory, True)
    if memory == "low":  # a lone row takes another quantisation scheme: the switch is honoured
        assert on["rows"]["alone"] != off["rows"]["alone"]
    assert on["batch_exact"] or not MNN_BATCH_EXACT
    if on["batch_exact"]:
        assert len(set(on["rows"].values())) == 1  # alone, in pairs, mixed and whole: the same bytes
