"""Reading an MNN model directory: its config and the files it refers to.

MNN itself does not notice a truncated weight file (it loads and produces
garbage), so before a load we compare the weight file's size with the extent
of the weights the graph refers to.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from pathlib import Path
from typing import Any

from .errors import MnnEngineError
from .native_output import captured_native_output

CONFIG_NAME = "config.json"

#: config keys naming files, with MNN's default file names
FILE_KEYS: dict[str, str | None] = {
    "llm_model": None,
    "llm_weight": None,
    "llm_config": "llm_config.json",
    "tokenizer_file": "tokenizer.txt",
}

_EXTERNAL = re.compile(rb'"external"\s*:\s*\[([^\]]*)\]')


def resolve_config_path(model: str | os.PathLike[str]) -> Path:
    """The config.json of a model given as its directory or its config file."""
    path = Path(model).expanduser()
    if path.is_dir():
        path = path / CONFIG_NAME
    if not path.is_file():
        raise MnnEngineError("model_not_found", f"no MNN model config at {path}", param="model")
    return path


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise MnnEngineError("invalid_model", f"{path.name} is not readable JSON: {exc}", param=path.name) from exc
    if not isinstance(data, dict):
        raise MnnEngineError("invalid_model", f"{path.name} must hold a JSON object", param=path.name)
    return data


def read_config(config_path: Path) -> dict[str, Any]:
    """config.json merged over its llm_config.json (as MNN merges them)."""
    config = _read_json(config_path)
    llm_config_name = config.get("llm_config", FILE_KEYS["llm_config"])
    if isinstance(llm_config_name, str):
        llm_config_path = config_path.parent / llm_config_name
        if llm_config_path.is_file():
            merged = _read_json(llm_config_path)
            merged.update(config)
            config = merged
    return config


def model_file(config_path: Path, config: dict[str, Any], key: str) -> Path | None:
    """Path of the file the config names under ``key`` (or its default)."""
    name = config.get(key, FILE_KEYS.get(key))
    if name is None:
        return None
    if not isinstance(name, str) or not name:
        raise MnnEngineError("invalid_model", f"{CONFIG_NAME}: '{key}' must be a file name", param=key)
    base = config.get("base_dir")
    root = config_path.parent / base if isinstance(base, str) else config_path.parent
    return root / name


def check_model_files(config_path: Path, config: dict[str, Any]) -> None:
    """Raise ``invalid_model`` naming the first missing or truncated file."""
    if not isinstance(config.get("llm_model"), str) or not config["llm_model"]:
        raise MnnEngineError("invalid_model", f"{config_path}: 'llm_model' is missing or empty", param="llm_model")
    config.setdefault("llm_weight", config["llm_model"] + ".weight")
    for key in ("llm_model", "llm_weight", "tokenizer_file"):
        path = model_file(config_path, config, key)
        if path is not None and not path.is_file():
            raise MnnEngineError("invalid_model", f"{key} file {path} does not exist", param=key)
    graph = model_file(config_path, config, "llm_model")
    weight = model_file(config_path, config, "llm_weight")
    assert graph is not None and weight is not None
    needed = required_weight_bytes(graph)
    actual = weight.stat().st_size
    if needed is not None and actual < needed:
        raise MnnEngineError(
            "invalid_model",
            f"weight file {weight} is truncated: {actual} bytes, the graph needs {needed}",
            param="llm_weight",
        )


def required_weight_bytes(graph: Path) -> int | None:
    """Bytes of external weight data the graph refers to, or None when it
    cannot be told (no MNN converter in this build)."""
    try:
        with captured_native_output():  # it prints CPU features on import
            import _tools  # the MNN wheel's converter module
    except ImportError:
        return None
    with tempfile.TemporaryDirectory(prefix="mnn-engine-graph-") as tmp:
        dump = Path(tmp) / "graph.json"
        with captured_native_output():
            ok = _tools.mnnconvert(
                ["mnnconvert", "-f", "MNN", "--modelFile", str(graph), "--JsonFile", str(dump)]
            )
        if not ok or not dump.is_file():
            raise MnnEngineError("invalid_model", f"{graph} is not a readable MNN graph", param="llm_model")
        text = dump.read_bytes()
    extent = 0
    for match in _EXTERNAL.finditer(text):
        numbers = [int(x) for x in match.group(1).split(b",") if x.strip()]
        if numbers:
            extent = max(extent, numbers[0] + sum(numbers[1:]))
    return extent
