"""What the HTTP server needs of an engine: the server is typed against this,
never against ``Engine`` itself, so the engine never depends on the server
(vLLM's entrypoints are typed against an engine client the same way)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from typing import Any, Protocol

from ..runtime.embedding import EmbeddingResult
from ..runtime.generation import GenerationResult, ScoreResult
from ..runtime.prompt import Message, Prompt
from ..store.layout import ModelInfo
from ..store.models import ModelStore
from .events import EventStream

#: how long an acquire waits for its model (a load included) before it is ``busy``; the server's queue timeout
ACQUIRE_TIMEOUT_S = 60.0


class ServedModel(Protocol):
    """What the server asks of a loaded model (``Llm`` is one), and nothing
    more: its facts, its tokenizer and template, and what structured output
    reads (``runtime.structured.GrammarModel``). Generating, scoring and
    embedding go through the engine (``ServedEngine.submit*``)."""

    kind: str
    embedding_dim: int
    load_seconds: float
    load_cache: dict[str, Any]

    @property
    def context_length(self) -> int: ...

    @property
    def capabilities(self) -> list[str]: ...

    def tokenize(self, text: str, *, limit: int | None = None) -> list[int]: ...

    def detokenize(self, token_ids: Sequence[int]) -> str: ...

    def token_bytes(self, token_id: int) -> bytes: ...

    def vocabulary(self) -> tuple[list[bytes], list[int]]: ...

    def tokenizer_info(self) -> dict[str, Any]: ...

    def apply_chat_template(self, messages: Sequence[Message], add_generation_prompt: bool = True,
                            enable_thinking: bool | None = None,
                            tools: Sequence[Mapping[str, Any]] | None = None) -> str: ...

    def prompt_ids(self, prompt: Prompt, *, enable_thinking: bool | None = None,
                   tools: Sequence[Mapping[str, Any]] | None = None) -> list[int]: ...

    def check_prompt(self, prompt: Prompt, *, enable_thinking: bool | None = None,
                     tools: Sequence[Mapping[str, Any]] | None = None) -> Prompt: ...


class ServedEngine(Protocol):
    """An engine with a model to serve (``mnn_engine.Engine`` is one)."""

    events: EventStream
    store: ModelStore

    @property
    def loaded_model(self) -> ServedModel: ...

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

    def submit_score(self, prompt: Any, continuation: Any, *, top_logprobs: int = 0) -> Future[ScoreResult]: ...

    def cancel_generation(self) -> None: ...

    def pull(self, spec: str, *, progress: Callable[[int, int, str], None] | None = None,
             **options: Any) -> ModelInfo: ...

    def unload(self, reason: str = "unloaded") -> None: ...

    def require_model_for_server(self) -> None: ...

    def set_server_state(self, state: str, address: str | None = None) -> None: ...


class ModelLease(Protocol):
    """One request's hold on a loaded model (``pool.Lease``)."""

    name: str
    engine: ServedEngine

    def release(self, keep_alive: Any = ...) -> None: ...


class ServedModels(Protocol):
    """The models a server serves, by name (``mnn_engine.engine.pool.ModelPool``):
    the server resolves a request's ``model`` here and leases its engine."""

    events: EventStream
    store: ModelStore
    #: False: one model answers every request (``--no-switch``, ``Engine.start_server``)
    switching: bool
    default_name: str | None
    max_loaded: int

    @property
    def generating(self) -> bool: ...

    @property
    def generation_cancelled(self) -> bool: ...

    def resolve(self, asked: Any, *, strict: bool = True) -> str: ...

    def try_acquire(self, name: str) -> ModelLease | None: ...

    def acquire(self, name: str, timeout: float = ACQUIRE_TIMEOUT_S) -> ModelLease: ...

    def unload(self, name: str) -> None: ...

    def facts(self, name: str) -> Any: ...

    def models(self) -> list[dict[str, Any]]: ...

    def model(self, name: str) -> dict[str, Any]: ...

    def loaded_engines(self) -> list[tuple[str, ServedEngine]]: ...

    def snapshot(self) -> dict[str, Any]: ...

    def require_ready_for_server(self) -> None: ...

    def set_server_state(self, state: str, address: str | None = None) -> None: ...

    def pull(self, spec: str, **options: Any) -> ModelInfo: ...


#: starts a background server for an engine or a pool (returns its URL), and stops it
ServerLauncher = tuple[Callable[..., str], Callable[[Any], None]]
