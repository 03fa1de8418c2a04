"""Reading and validating an MNN model directory.

A model is a directory with a root ``config.json`` naming its files. Before a
model is imported or loaded every file it names must be a relative path that
stays inside the directory (no ``..``, no absolute path, no symlink leading
out) and exist. MNN itself does not notice a truncated weight file (it loads
and produces garbage), so the weight file's size is compared with the extent
of the weights the graph refers to.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from .. import jsonutil
from ..checks import is_int
from ..errors import MnnEngineError
from .mnn_graph import (
    QUANTIZED_HEADER_BYTES,
    GraphError,
    GraphSummary,
    quantized_weights_problem,
    read_graph,
    read_graph_file,
    read_output_names,
)

CONFIG_NAME = "config.json"
MARKET_CONFIG_NAME = "market_config.json"
TOKENIZER_MAGIC = b"430"

# config keys naming files: (MNN's default name, required when not named)
FILE_KEYS: dict[str, tuple[str | None, bool]] = {
    "llm_model": (None, True),
    "llm_weight": (None, True),  # default: llm_model + ".weight"
    "llm_config": ("llm_config.json", False),
    "tokenizer_file": ("tokenizer.txt", True),
    "embedding_file": ("embeddings_bf16.bin", False),
    "context_file": (None, False),
}
VISUAL_KEYS = {"visual_model": "visual.mnn"}
AUDIO_KEYS = {"audio_model": "audio.mnn"}



#: what llmexport writes beside an export: the arguments it ran with
EXPORT_ARGS_NAME = "export_args.json"


def export_args(model_dir: Path) -> dict[str, Any]:
    """The arguments llmexport exported the model with (``export_args.json``), or {} when it left none
    (published exports usually do not carry it) or it is unreadable."""
    try:
        args = json.loads((model_dir / EXPORT_ARGS_NAME).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError):
        return {}
    return args if isinstance(args, dict) else {}


def _int(value: Any) -> int | None:
    return value if is_int(value) else None


def quantization_problem(model_dir: Path, config: dict[str, Any]) -> str | None:
    """Why an export's weight quantisation is known to go wrong, from llmexport's record, or None.

    A quantisation block that does not divide the hidden size: llmexport 0.0.5 exports it without a word,
    and the model loads and answers nonsense, differently from run to run (SmolLM2-135M, hidden 576, with
    ``--quant_block 128``: perplexity 80,000-390,000 against 37 with blocks of 64; tools/bench/quality.py)."""
    args = export_args(model_dir)
    hidden = _int(config.get("hidden_size"))
    if not hidden:
        return None
    for key in ("quant_block", "lm_quant_block"):
        block = _int(args.get(key))
        if block and hidden % block:
            return (f"{model_dir.name} was exported with {key} {block}, which does not divide its hidden size "
                    f"{hidden}: such exports answer nonsense (export it again with a block that divides "
                    f"{hidden}, e.g. 32 or 64)")
    return None


def _bad(message: str, param: str) -> MnnEngineError:
    return MnnEngineError("invalid_model", message, param=param)


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
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise _bad(f"{path.name} is not readable JSON: {exc}", path.name) from exc
    if not isinstance(data, dict):
        raise _bad(f"{path.name} must hold a JSON object", path.name)
    return data


def _inside(root: Path, name: Any, key: str) -> Path:
    """The file ``name`` (from config key ``key``) under ``root``, refusing
    anything that could point outside the model directory."""
    if not isinstance(name, str) or not name or "\0" in name:
        raise _bad(f"{CONFIG_NAME}: '{key}' must be a non-empty file name", key)
    pure = PurePosixPath(name.replace("\\", "/"))
    if pure.is_absolute() or os.path.isabs(name):
        raise _bad(f"{CONFIG_NAME}: '{key}' is an absolute path ({name!r}); it must be relative", key)
    if ".." in pure.parts:
        raise _bad(f"{CONFIG_NAME}: '{key}' leaves the model directory ({name!r})", key)
    path = root.joinpath(*pure.parts)
    real_root = root.resolve()
    try:
        real = path.resolve()
    except (OSError, RuntimeError) as exc:  # symlink loops
        raise _bad(f"{key} file {name!r} cannot be resolved: {exc}", key) from exc
    if real != real_root and real_root not in real.parents:
        raise _bad(f"{key} file {name!r} is a link that leads outside the model directory", key)
    return path


def _is_file(path: Path) -> bool:
    try:
        return path.is_file()
    except OSError:  # e.g. a name too long for the file system
        return False


def read_config(config_path: Path) -> dict[str, Any]:
    """config.json merged over its llm_config.json (as MNN merges them)."""
    config = _read_json(config_path)
    llm_config_name = config.get("llm_config", FILE_KEYS["llm_config"][0])
    if isinstance(llm_config_name, str) and llm_config_name:
        llm_config_path = _inside(config_path.parent, llm_config_name, "llm_config")
        if _is_file(llm_config_path):
            merged = _read_json(llm_config_path)
            merged.update(config)
            config = merged
    return config


def model_files(config_path: Path, config: dict[str, Any]) -> dict[str, Path]:
    """Every file the config refers to, by config key, validated (see module doc)."""
    root = config_path.parent
    base = config.get("base_dir")
    if base not in (None, "", "."):
        root = _inside(root, base, "base_dir")
    llm_model = config.get("llm_model")
    if not isinstance(llm_model, str) or not llm_model.strip():
        raise _bad(f"{config_path}: 'llm_model' is missing or empty", "llm_model")
    keys = dict(FILE_KEYS)
    if config.get("is_visual"):
        keys.update({k: (v, True) for k, v in VISUAL_KEYS.items()})
    if config.get("is_audio"):
        keys.update({k: (v, True) for k, v in AUDIO_KEYS.items()})
    files: dict[str, Path] = {}
    for key, (default, required) in keys.items():
        named = key in config
        name = config.get(key, default)
        if key == "llm_weight" and not named:
            name = llm_model + ".weight"
        if name is None:
            continue
        path = _inside(root, name, key)
        if _is_file(path):
            files[key] = path
        elif named or required:
            raise _bad(f"{key} file {name!r} does not exist in {config_path.parent}", key)
    return files


def validate_model_dir(model: str | os.PathLike[str], *, check_contents: bool = True) -> dict[str, Any]:
    """Validate a model directory; returns its merged config. Raises
    ``model_not_found`` or ``invalid_model`` naming the offending file.
    ``check_contents=False``: the config and the files' paths only (an import
    whose contents a first-touch child checks next)."""
    if check_contents:
        return read_model_dir(model).config
    config_path = resolve_config_path(model)
    config = read_config(config_path)
    model_files(config_path, config)
    return config


@dataclass(frozen=True, eq=False)
class ModelDir:
    """One model directory, read and validated once: its merged config, the
    files it names (each checked to stay inside the directory), its kind, the
    weight extent its graph needs, and the stamp (size and modification time
    of each file) that says when this reading is stale. The store keeps one
    per model (``ModelStore.model_dir``); the pool's facts, ``Engine.load``,
    ``Llm``, the prepared cache and the first-touch check all take it."""

    config_path: Path
    config: dict[str, Any] = field(repr=False)
    files: dict[str, Path] = field(repr=False)
    #: "chat" for a language model, "embedding" for a text-embedding model
    kind: str
    #: bytes of the weight file the graph refers to
    weight_extent: int
    #: [size, mtime_ns] of the config and of each file it names, by role
    stamp: dict[str, list[int]] = field(repr=False)

    @property
    def path(self) -> Path:
        return self.config_path.parent

    @property
    def is_visual(self) -> bool:
        return bool(self.config.get("is_visual"))

    @property
    def is_audio(self) -> bool:
        return bool(self.config.get("is_audio"))

    def is_stale(self) -> bool:
        """The files changed since they were read (a stat each, nothing read)."""
        return file_stamp(self.config_path, self.files) != self.stamp


def file_stamp(config_path: Path, files: dict[str, Path]) -> dict[str, list[int]]:
    """Size and modification time of a model's config and of each file it names, by role."""
    stamp: dict[str, list[int]] = {}
    for key, path in {"config": config_path, **files}.items():
        with contextlib.suppress(OSError):
            info = path.stat()
            stamp[key] = [info.st_size, info.st_mtime_ns]
    return stamp


def read_stamp(model: str | os.PathLike[str]) -> dict[str, list[int]]:
    """``ModelDir.stamp`` from the config and the file paths alone (the contents unchecked)."""
    config_path = resolve_config_path(model)
    return file_stamp(config_path, model_files(config_path, read_config(config_path)))


def read_model_dir(model: str | os.PathLike[str]) -> ModelDir:
    """Read and validate a model directory (or its config.json) once: its
    config, its files, its tokenizer's header, its graph (read once, for the
    weight extent and the kind) against its weight file, and a vision or
    audio encoder's graph against its own (``check_graph``). Raises
    ``model_not_found`` or ``invalid_model`` naming the offending file."""
    config_path = resolve_config_path(model)
    stamp_before = config_path.stat()
    config = read_config(config_path)
    files = model_files(config_path, config)
    check_tokenizer_header(files["tokenizer_file"])
    summary = check_graph(files["llm_model"], files["llm_weight"], "llm_model", "llm_weight")
    kind = kind_of(summary.outputs)
    for key in (*VISUAL_KEYS, *AUDIO_KEYS):
        if key in files:  # (MNN reads an encoder's weights from the graph's name + ".weight")
            check_graph(files[key], files[key].with_name(files[key].name + ".weight"), key, key)
    stamp = file_stamp(config_path, files)
    if stamp.get("config") != [stamp_before.st_size, stamp_before.st_mtime_ns]:  # replaced while read: not cached
        stamp["config"] = [-1, -1]
    return ModelDir(config_path, config, files, kind, summary.weight_extent, stamp)


def check_graph(graph: Path, weights: Path, param: str, weights_param: str) -> GraphSummary:
    """Read ``graph`` (``mnn_graph``: every offset checked) and check its
    external weight file ``weights`` against it: long enough for every op,
    each quantised layer's header its own (``check_quantized_weights``).
    ``invalid_model`` naming the file (``param`` / ``weights_param``);
    returns what was read of the graph."""
    try:
        summary = read_graph(graph.read_bytes())
    except GraphError as exc:
        raise _bad(f"{graph} is not a readable MNN graph: {exc}", param) from exc
    except OSError as exc:
        raise _bad(f"{graph} cannot be read: {exc.strerror}", param) from exc
    extent = summary.weight_extent
    if extent:
        try:
            actual = weights.stat().st_size
        except OSError as exc:
            raise _bad(f"weight file {weights} cannot be read: {exc.strerror}", weights_param) from exc
        if actual < extent:
            raise _bad(f"weight file {weights} is truncated: {actual} bytes, the graph needs {extent}", weights_param)
        check_quantized_weights(weights, summary, weights_param)
    return summary


def check_quantized_weights(weights: Path, summary: GraphSummary, param: str) -> None:
    """Each quantised layer's header in the weight file agrees with the graph
    (``mnn_graph.quantized_weights_problem``: MNN trusts it);
    ``invalid_model`` naming the first layer that does not. A few bytes read
    per layer."""
    try:
        with open(weights, "rb") as f:
            for layer in summary.quantized:
                f.seek(layer.offset)
                problem = quantized_weights_problem(layer, f.read(min(layer.size, QUANTIZED_HEADER_BYTES)))
                if problem:
                    raise _bad(f"weight file {weights} is damaged: layer {layer.layer}'s quantised weights have "
                               f"{problem}", param)
    except OSError as exc:
        raise _bad(f"weight file {weights} cannot be read: {exc.strerror}", param) from exc


def capabilities(kind: str, config: Mapping[str, Any]) -> list[str]:
    """What a model can do, as Ollama names it: completion, tools, thinking
    (its chat template knows <think>), vision; or embedding. ``config``: its
    merged config (``Llm.file_config``, ``ModelFacts.config``)."""
    if kind == "embedding":
        return ["embedding"]
    template = jsonutil.dumps(config.get("jinja", {})).decode() + str(config.get("chat_template", ""))
    found = ["completion", "tools"]
    if "<think>" in template or "enable_thinking" in template:
        found.append("thinking")
    if config.get("is_visual"):
        found.append("vision")
    return found


def check_tokenizer_header(path: Path) -> None:
    """MNN's tokenizer files start with a line "430 <type>"."""
    try:
        with open(path, "rb") as f:
            head = f.read(64).split(b"\n", 1)[0].split()
    except OSError as exc:
        raise _bad(f"tokenizer file {path} cannot be read: {exc.strerror}", "tokenizer_file") from exc
    if len(head) < 2 or head[0] != TOKENIZER_MAGIC or not head[1].isdigit():
        raise _bad(f"tokenizer file {path} is not an MNN tokenizer (no \"430 <type>\" header)", "tokenizer_file")


def model_kind(graph: Path) -> str:
    """The kind of the model whose graph is ``graph`` (``kind_of``), from its
    output names alone (what a listing reads of a model that failed the
    whole reading, ``read_model_dir``)."""
    try:
        outputs = read_output_names(graph.read_bytes())
    except GraphError as exc:
        raise _bad(f"{graph} is not a readable MNN graph: {exc}", "llm_model") from exc
    except OSError as exc:
        raise _bad(f"{graph} cannot be read: {exc.strerror}", "llm_model") from exc
    return kind_of(outputs)


def kind_of(outputs: tuple[str, ...] | list[str]) -> str:
    """``"embedding"`` for a graph with the outputs llmexport gives a text-embedding model
    (``sentence_embeddings``), else ``"chat"``."""
    return "embedding" if "sentence_embeddings" in outputs else "chat"


def display_name(model_dir: Path, fallback: str) -> str:
    """The human name from market_config.json (optional metadata), else ``fallback``."""
    path = model_dir / MARKET_CONFIG_NAME
    if not path.is_file():
        return fallback
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        return fallback
    if isinstance(data, dict):
        for key in ("modelName", "model_name", "name", "displayName"):
            if isinstance(data.get(key), str) and data[key].strip():
                return data[key].strip()
    return fallback


def parameter_count(config_path: Path, config: dict[str, Any]) -> int:
    """The model's parameters as its files hold them: the weights of the
    graph's convolutions (every linear layer, the output head included) and
    the embedding table when it is a file of its own (bf16: two bytes a
    value). Norm weights are left out (a few thousand). 0 when unreadable.
    Reads the graph once per version of the file."""
    files = model_files(config_path, config)
    graph = files["llm_model"]
    embedding = files.get("embedding_file")
    try:
        key = (str(graph), graph.stat().st_mtime_ns, graph.stat().st_size)
        table = embedding.stat().st_size // 2 if embedding is not None and embedding.is_file() else 0
    except OSError:
        return 0
    return _conv_parameters(key) + table


@functools.lru_cache(maxsize=16)
def _conv_parameters(key: tuple[str, int, int]) -> int:
    try:
        return read_graph_file(Path(key[0])).conv_parameters
    except (OSError, GraphError):
        return 0


def parameter_size(count: int) -> str:
    """Ollama's way of writing a parameter count: ``135.0M``, ``1.7B`` ("" for 0)."""
    if count <= 0:
        return ""
    for scale, unit in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "K")):
        if count >= scale:
            return f"{count / scale:.1f}{unit}"
    return str(count)
