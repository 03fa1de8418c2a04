"""What a served model is, and how a server lists it: a model's facts, read
from its files (``read_facts``: off the IOLoop), and the one entry shape
/v1/models, /api/tags, /api/ps and /health show (``model_entry``). The pool
(``engine.pool``) and the single-model server (``engine.single``) both list
their models through here."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

from ..checks import is_int
from ..errors import MnnEngineError
from ..runtime.llm import DEFAULT_CONTEXT
from ..runtime.model_files import (
    CONFIG_NAME,
    capabilities,
    export_args,
    model_files,
    model_kind,
    parameter_count,
    parameter_size,
    read_config,
)
from ..store.models import ModelStore
from .engine import Engine, model_options

#: an expiry shown for a model that never expires (/api/ps)
NEVER = float("inf")


@dataclass(frozen=True)
class ModelFacts:
    """What the server tells about a model without loading it."""

    name: str
    model_id: str | None
    path: Path
    kind: str  # "chat" or "embedding"
    is_visual: bool
    size_bytes: int
    created: float
    context_length: int = DEFAULT_CONTEXT  # its config's (MNN's max_all_tokens), before any load option
    is_audio: bool = False
    config: dict[str, Any] = field(default_factory=dict, compare=False)  # its merged config.json
    #: a LoRA adapter's: the served name and directory of the model it runs over (its other facts are that model's)
    base: str | None = None
    base_path: Path | None = None

    @property
    def capabilities(self) -> list[str]:
        """What the model can do, as Ollama names them."""
        return capabilities(self.kind, self.config)


def read_facts(store: ModelStore, name: str, model_id: str | None, target: str) -> ModelFacts:
    """The facts of the model served as ``name``: the store's ``model_id``,
    else the model directory ``target``. Reads its files: off the IOLoop."""
    path = store.path(model_id) if model_id is not None else Path(target)
    try:
        reading = store.model_dir(path)  # the store's one reading, which a load then takes as it is
        config, kind = reading.config, reading.kind
    except MnnEngineError as exc:
        if exc.code != "invalid_model":
            raise
        # damaged contents (truncated weights...) are listed as before; their load is the request's error
        config = read_config(path / CONFIG_NAME)
        kind = model_kind(model_files(path / CONFIG_NAME, config)["llm_model"])
    if model_id is not None:
        info = store.get(model_id)
        size, created = info.size_bytes, info.created
    else:
        size = directory_bytes(path)
        created = path.stat().st_mtime
    context = config.get("max_all_tokens")
    context = context if is_int(context) and context > 1 else DEFAULT_CONTEXT
    return ModelFacts(name, model_id, path, kind, bool(config.get("is_visual")), size, created, context,
                      bool(config.get("is_audio")), config)


def adapter_facts(store: ModelStore, base: ModelFacts, name: str) -> ModelFacts:
    """The facts of ``base``'s stored adapter ``name``: the base's, under the adapter's served name,
    path, size and time."""
    info = store.get_adapter(base.name, name)
    return replace(base, name=info.id, model_id=info.id, path=Path(info.path), size_bytes=info.size_bytes,
                   created=info.created, base=base.name, base_path=base.path)


def facts_are_stale(store: ModelStore, facts: ModelFacts) -> bool:
    """Whether a store model was replaced since ``facts`` were read (pull --update, import --replace)."""
    if facts.model_id is None:
        return False
    try:
        path = facts.path if facts.base is not None else store.path(facts.model_id)
        return path.stat().st_mtime != facts.created
    except OSError:
        return False


def directory_bytes(path: Path) -> int:
    """What a model directory's files take on disk (its top level: MNN's files are there)."""
    return sum(f.stat().st_size for f in path.iterdir() if f.is_file())


def model_entry(facts: ModelFacts, *, engine: Engine | None, state: str, users: int, expires: float,
                default: bool, store: ModelStore, defaults: Mapping[str, Any]) -> dict[str, Any]:
    """A served model's entry: its facts, its state, and the context it has
    (loaded) or would load with (its options over ``defaults``)."""
    context = None
    if engine is not None:
        with contextlib.suppress(MnnEngineError):
            context = engine.llm.context_length
    if context is None:  # what it would load with
        context = facts.context_length
        with contextlib.suppress(MnnEngineError):
            context = model_options(store, facts.model_id, defaults=defaults).context_length or context
    if users or state != "loaded" or expires == NEVER:
        expires_at = None
    else:
        expires_at = time.time() + max(0.0, expires - time.monotonic())
    return {"name": facts.name, "id": facts.model_id, "path": str(facts.path), "state": state,
            "loaded": engine is not None, "kind": facts.kind, "vision": facts.is_visual,
            "size_bytes": facts.size_bytes, "created": facts.created, "context_length": context,
            "in_use": users, "expires_at": expires_at, "default": default}


# ---------------------------------------------------------------- Ollama's details
def _quantization(model_dir: Path) -> str:
    """The weights' quantisation as llmexport recorded it (``export_args.json``:
    ``quant_bit``, ``quant_block``), e.g. ``Q4_B64``; "" when not recorded."""
    args = export_args(model_dir)
    bits, block = args.get("quant_bit"), args.get("quant_block")
    if not is_int(bits):
        return ""
    return f"Q{bits}" + (f"_B{block}" if is_int(block) and block else "")


@lru_cache(maxsize=64)
def _details(config_path: Path, created: float, family: str) -> tuple[dict[str, Any], int]:
    """Ollama's ``details`` of a model and its parameter count, from its files
    (reads the graph: run off the IOLoop; kept per version of the files)."""
    count = parameter_count(config_path, read_config(config_path))
    return ({"parent_model": "", "format": "mnn", "family": family, "families": [family] if family else None,
             "parameter_size": parameter_size(count), "quantization_level": _quantization(config_path.parent)},
            count)


def model_details(facts: ModelFacts) -> tuple[dict[str, Any], int]:
    """Ollama's ``details`` of a model (/api/tags, /api/show) and its parameter count."""
    details, count = _details((facts.base_path or facts.path) / CONFIG_NAME, facts.created,
                              str(facts.config.get("model_type", "")))
    if facts.base is not None:  # Ollama's parent_model: what an adapter's model was made from
        details = {**details, "parent_model": facts.base}
    return details, count
