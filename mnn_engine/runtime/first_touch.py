"""MNN's first touch of a model's files happens in a child process.

MNN trusts its files: a damaged tokenizer dies with SIGFPE, a damaged graph
with SIGSEGV, taking a server or a notebook kernel with it. The Python checks
(``model_files``, ``mnn_graph``: the graph, the weight file's extent, each
quantised layer's header) catch what they can name; for everything else
the first load of each version of a model's files, with each engine build,
runs in a child process that loads the model and exercises the tokenizer, the
chat template and one forward. A crash there becomes ``invalid_model`` naming
the stage and the files, and the parent lives. A verdict is remembered (a
marker keyed by each file's identity, size and modification time and by the
engine's identity), so later loads do not pay for it; with the same ``tmp_path`` the
child also leaves MNN's prepared-weight cache warm for the parent's load.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from .. import config
from ..errors import MnnEngineError
from .build import engine_identity

STAGE_PREFIX = "mnn-engine-stage: "
RESULT_PREFIX = "mnn-engine-result: "
TIMEOUT_SECONDS = 900.0
_STAGES = {
    "load": "loading the model (graph, weights, tokenizer)",
    "forward": "running a first forward",
    "tokenize": "tokenizing text",
    "vocabulary": "reading the vocabulary",
    "template": "applying the chat template",
    "image": "running the visual encoder on a first image",
    "sound": "running the audio encoder on a first sound",
}


def markers_dir() -> Path:
    return config.verified_dir()


def _marker(config_path: Path, files: dict[str, Path]) -> Path:
    stamps = {}  # the same file, even renamed (an import's staging directory); not a copy of it
    for key, path in sorted({"config": config_path, **files}.items()):
        info = path.stat()
        stamps[key] = [info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns]
    digest = hashlib.sha256(json.dumps([engine_identity(), stamps], sort_keys=True).encode()).hexdigest()
    return markers_dir() / digest[:32]


def check_in_child(config_path: Path, files: dict[str, Path], overrides: dict[str, Any]) -> None:
    """Load the model once in a child process unless this version of its
    files already passed; ``invalid_model`` if MNN crashes there."""
    marker = _marker(config_path, files)
    if marker.is_file():
        return
    # (the current directory is dropped from the child's path: a source checkout
    # there would shadow the installed package)
    command = [sys.executable, "-c", "import sys; sys.path[:] = [p for p in sys.path if p not in ('', '.')]; "
               "from mnn_engine.runtime.first_touch_child import main; main()", str(config_path.resolve()),
               json.dumps(overrides)]
    try:
        # (no Python fault handler in the child: the parent reports the crash)
        child = subprocess.run(command, capture_output=True, timeout=TIMEOUT_SECONDS, stdin=subprocess.DEVNULL,
                               env={**os.environ, "PYTHONFAULTHANDLER": ""})
    except subprocess.TimeoutExpired as exc:
        raise MnnEngineError("invalid_model", f"MNN did not finish opening {config_path.parent} in "
                                              f"{TIMEOUT_SECONDS:.0f} s", param="model") from exc
    lines = child.stdout.decode("utf-8", "replace").splitlines()
    stages = [line[len(STAGE_PREFIX):] for line in lines if line.startswith(STAGE_PREFIX)]
    results = [line[len(RESULT_PREFIX):] for line in lines if line.startswith(RESULT_PREFIX)]
    if child.returncode < 0:
        stage = _STAGES.get(stages[-1], stages[-1]) if stages else "starting"
        name = signal.Signals(-child.returncode).name
        names = ", ".join(sorted(p.name for p in files.values()))
        raise MnnEngineError("invalid_model", f"MNN crashed ({name}) {stage} from {config_path.parent}: "
                                              f"one of its files is damaged ({names})", param="model")
    if results:
        outcome = json.loads(results[-1])
        if outcome.get("code"):
            raise MnnEngineError(outcome["code"], outcome["message"], param=outcome.get("param"))
    if child.returncode != 0 or not results:
        detail = child.stderr.decode("utf-8", "replace").strip().splitlines()[-1:] or ["no output"]
        raise MnnEngineError("model_load_failed",
                             f"checking {config_path.parent} failed (exit {child.returncode}): {detail[0]}")
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.write_text(json.dumps({"model": str(config_path.parent)}))
