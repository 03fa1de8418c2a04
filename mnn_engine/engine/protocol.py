"""What the HTTP server needs of an engine: the server is typed against this,
never against ``Engine`` itself, so the engine never depends on the server
(vLLM's entrypoints are typed against an engine client the same way)."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, Protocol

from ..runtime.embedding import EmbeddingResult
from ..runtime.generation import GenerationResult
from ..runtime.llm import Llm
from ..store.layout import ModelInfo
from ..store.models import ModelStore
from .events import EventStream


class ServedEngine(Protocol):
    """An engine with a model to serve (``mnn_engine.Engine`` is one)."""

    events: EventStream
    store: ModelStore

    @property
    def llm(self) -> Llm: ...

    @property
    def generating(self) -> bool: ...

    @property
    def generation_cancelled(self) -> bool: ...

    @property
    def active_model_id(self) -> str | None: ...

    def snapshot(self) -> dict[str, Any]: ...

    def submit(self, prompt: Any, callback: Callable[[str], Any] | None = None, *,
               on_prompt: Callable[[str | None, int], Any] | None = None, **sampling: Any) -> Future[GenerationResult]:
        ...

    def submit_embed(self, inputs: Any, *, normalize: bool = True,
                     truncate: bool = False) -> Future[EmbeddingResult]: ...

    def cancel_generation(self) -> None: ...

    def pull(self, spec: str, *, progress: Callable[[int, int, str], None] | None = None,
             **options: Any) -> ModelInfo: ...

    def unload(self) -> None: ...

    def require_model_for_server(self) -> None: ...

    def set_server_state(self, state: str, address: str | None = None) -> None: ...


#: starts a background server for an engine (returns its URL), and stops it
ServerLauncher = tuple[Callable[..., str], Callable[[Any], None]]
