"""mnn-engine: run MNN large language models on the device.

The core API is :class:`Llm`::

    from mnn_engine import Llm
    with Llm("~/models/Qwen3-0.6B-MNN") as llm:
        for piece in llm.stream([{"role": "user", "content": "Hi!"}], max_tokens=64):
            print(piece, end="", flush=True)
"""

from .errors import ERROR_CODES, MnnEngineError
from .runtime.native_output import captured_native_output

with captured_native_output():  # the engine prints CPU features when it loads
    try:
        from . import _mnn  # noqa: F401
    except ImportError as exc:
        from ._missing_core import explain

        raise ImportError(explain(__path__[0])) from exc

from .engine.engine import Engine, install_server_launcher
from .engine.events import Event, LogEntry
from .engine.pool import ModelPool
from .engine.settings import LoadOptions
from .runtime.build import backend_capabilities, build_info
from .runtime.embedding import EmbeddingResult
from .runtime.generation import GenerationResult, ScoreResult, TokenLogprob
from .runtime.llm import Llm
from .runtime.sampling import GenerationConfig
from .store.layout import ModelInfo, model_id_from_name
from .store.models import ModelStore
from .version import __version__


def _start_server(owner: Engine | ModelPool, **options: object) -> str:
    from .engine.single import SingleModel
    from .server.runner import start_background_server  # tornado is imported when a server starts

    models = SingleModel(owner) if isinstance(owner, Engine) else owner  # an engine serves its one model
    return start_background_server(models, owner=owner, **options)  # type: ignore[arg-type]


def _stop_server(owner: Engine | ModelPool) -> None:
    from .server.runner import stop_background_server

    stop_background_server(owner)


install_server_launcher((_start_server, _stop_server))

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
    "ModelPool",
    "ModelStore",
    "ScoreResult",
    "TokenLogprob",
    "__version__",
    "backend_capabilities",
    "build_info",
    "model_id_from_name",
]
