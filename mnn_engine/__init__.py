"""mnn-engine: run MNN large language models on the device.

The core API is :class:`Llm`::

    from mnn_engine import Llm
    with Llm("~/models/Qwen3-0.6B-MNN") as llm:
        for piece in llm.stream([{"role": "user", "content": "Hi!"}], max_tokens=64):
            print(piece, end="", flush=True)
"""

from .errors import ERROR_CODES, MnnEngineError
from .native_output import captured_native_output

with captured_native_output():  # the engine prints CPU features when it loads
    try:
        from . import _mnn  # noqa: F401
    except ImportError as exc:
        from ._missing_core import explain

        raise ImportError(explain(__path__[0])) from exc

from .build import backend_capabilities, build_info
from .embedding import EmbeddingResult
from .engine import Engine, LoadOptions
from .llm import GenerationResult, Llm, ScoreResult, TokenLogprob
from .models import ModelInfo, ModelStore, model_id_from_name
from .sampling import GenerationConfig
from .state import Event, LogEntry
from .version import __version__

__all__ = [
    "ERROR_CODES",
    "EmbeddingResult",
    "Engine",
    "Event",
    "GenerationConfig",
    "GenerationResult",
    "Llm",
    "LoadOptions",
    "LogEntry",
    "MnnEngineError",
    "ModelInfo",
    "ModelStore",
    "ScoreResult",
    "TokenLogprob",
    "__version__",
    "backend_capabilities",
    "build_info",
    "model_id_from_name",
]
