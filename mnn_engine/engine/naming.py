"""How a request's ``model`` names a served model: the name itself, or both
slugged as a store ID (``Qwen3-0.6B``, Ollama's ``qwen3:0.6b`` and
``tiny:latest`` name ``qwen3-0-6b``, ``tiny``), and the error for a name
that names nothing (Ollama's words)."""

from __future__ import annotations

from ..errors import MnnEngineError
from ..store.layout import model_id_from_name


def names(asked: str, *served: str | None) -> bool:
    """Whether ``asked`` names one of ``served``: itself, or once both are slugged."""
    wanted = slug(asked)
    return bool(wanted) and any(n and (n == asked or slug(n) == wanted) for n in served)


def slug(name: str) -> str:
    """``name`` as a store ID would be made from it ("" when none can)."""
    try:
        return model_id_from_name(name.strip().removesuffix(":latest"))
    except MnnEngineError:
        return ""


def model_not_found(asked: str) -> MnnEngineError:
    # Ollama's words (server/routes.go): model "x" not found, try pulling it first
    return MnnEngineError("model_not_found", f'model "{asked}" not found, try pulling it first', param="model")
