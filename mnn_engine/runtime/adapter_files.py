"""A LoRA adapter's directory, read and checked against its base before MNN
sees it.

An adapter is what llmexport's split LoRA writes (``--lora_path DIR
--lora_split``): ``lora.mnn``, the base's graph with each adapted projection
``W x`` followed by ``B (A x)`` and their sum, the factors inside the graph
(the scale ``lora_alpha / r`` already multiplied into ``B``), the base's
weights read from the base's own weight file. MNN runs it over the loaded
base (``Llm::create_lora``: the module shares the base's weights). So an
adapter fits one base: the one it was exported over. Beside the graph, the
directory may hold peft's ``adapter_config.json`` and mnn-engine's
``adapter.json`` (its base, the base weight file's SHA-256, rank, scale:
``tools/models/build_test_models.py`` writes it).

MNN reads the graph without checking it: a damaged file would crash the
process, and a graph made over another model would read its weights from the
wrong places. ``read_adapter_dir`` checks the graph's structure
(``mnn_graph``), that it reads exactly the base's weight extent and holds the
base's convolutions plus factors of its own.
"""

from __future__ import annotations

import json
import os
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..checks import is_int, is_number
from ..errors import MnnEngineError
from .mnn_graph import GraphError, conv_weights, read_graph_file
from .model_files import ModelDir

#: the graph llmexport's split LoRA writes
ADAPTER_GRAPH = "lora.mnn"
#: mnn-engine's record of an adapter's base and shape
ADAPTER_MANIFEST = "adapter.json"
#: peft's
PEFT_CONFIG = "adapter_config.json"


def _bad(path: Path, message: str) -> MnnEngineError:
    return MnnEngineError("invalid_model", f"adapter {path}: {message}", param="adapter")


@dataclass(frozen=True, eq=False)
class AdapterDir:
    """One adapter, read and checked against its base."""

    path: Path
    graph: Path
    #: adapter.json's fields, else what peft's adapter_config.json says ({} when neither is there)
    manifest: dict[str, Any] = field(repr=False)
    #: the adapter's own parameters (its low-rank factors)
    parameters: int
    size_bytes: int

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def rank(self) -> int | None:
        rank = self.manifest.get("rank")
        return rank if is_int(rank) else None

    @property
    def scale(self) -> float | None:
        """``lora_alpha / r`` as the graph holds it now (MNN has no runtime scale: the store
        rescales the graph, ``ModelStore.set_adapter_scale``)."""
        scale = self.manifest.get("scale")
        return float(scale) if is_number(scale) else None


def rescaled_graph(data: bytes, factor: float) -> bytes:
    """An adapter graph with its strength multiplied by ``factor``: every
    ``B`` factor (llmexport's ``<layer><projection>_B`` convolutions, which
    carry the export's ``lora_alpha / r``) scaled in place, nothing else
    touched. ``GraphError`` when the graph holds no such factor."""
    found = conv_weights(data, "_B")
    if not found:
        raise GraphError("it holds no LoRA factors (no <layer><projection>_B convolution)")
    out = bytearray(data)
    for start, count in found:
        weights = struct.unpack_from(f"<{count}f", out, start)
        struct.pack_into(f"<{count}f", out, start, *(w * factor for w in weights))
    return bytes(out)


def _manifest(path: Path) -> dict[str, Any]:
    for name in (ADAPTER_MANIFEST, PEFT_CONFIG):
        try:
            data = json.loads((path / name).read_text(encoding="utf-8"))
        except FileNotFoundError:
            continue
        except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
            raise _bad(path, f"{name} is not readable JSON: {exc}") from exc
        if not isinstance(data, dict):
            raise _bad(path, f"{name} must hold a JSON object")
        if name == PEFT_CONFIG:  # peft's names
            rank, alpha = data.get("r"), data.get("lora_alpha")
            data = {"rank": rank, "alpha": alpha, "target_modules": data.get("target_modules"),
                    "scale": alpha / rank if is_number(alpha) and is_int(rank) and rank > 0 else None}
        return data
    return {}


def read_adapter_dir(adapter: str | os.PathLike[str], base: ModelDir) -> AdapterDir:
    """Read the adapter at ``adapter`` (its directory, or its ``lora.mnn``) and
    check it fits ``base``; ``invalid_model`` (naming the adapter) when it is
    missing, damaged or made over another model."""
    given = Path(adapter).expanduser()
    path, graph = (given.parent, given) if given.suffix == ".mnn" else (given, given / ADAPTER_GRAPH)
    if not graph.is_file():
        raise _bad(path, f"no {graph.name} (an adapter is llmexport's --lora_split export)")
    if base.kind != "chat":
        raise _bad(path, f"{base.path.name} is a {base.kind} model: adapters go over chat models")
    try:
        summary = read_graph_file(graph)
        base_summary = read_graph_file(base.files["llm_model"])
    except GraphError as exc:
        raise _bad(path, f"{graph.name} is not a readable MNN graph: {exc}") from exc
    except OSError as exc:
        raise _bad(path, f"{graph.name} cannot be read: {exc.strerror}") from exc
    if summary.weight_extent != base.weight_extent or summary.conv_parameters <= base_summary.conv_parameters:
        raise _bad(path, f"it was exported over another model than {base.path.name} (its graph reads "
                         f"{summary.weight_extent} bytes of weights and holds {summary.conv_parameters} "
                         f"convolution weights; {base.path.name}'s reads {base.weight_extent} and holds "
                         f"{base_summary.conv_parameters}, and an adapter adds its factors to those)")
    size = sum(f.stat().st_size for f in path.iterdir() if f.is_file()) if path.is_dir() else graph.stat().st_size
    return AdapterDir(path, graph, _manifest(path), summary.conv_parameters - base_summary.conv_parameters, size)
