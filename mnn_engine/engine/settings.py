"""How a model loads (``LoadOptions``) and how the pool keeps models
(``PoolSettings``): each field's default, range and help declared once
(``mnn_engine.options``); ``serve``, ``run`` and ``load`` build their flags
from them (``mnn_engine.cli.flags``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ..checks import invalid
from ..options import check, keep_alive_flag, option
from ..runtime.build import BACKENDS
from ..runtime.device import default_threads
from ..runtime.llm import BROKEN_QUANT_QKV, DEFAULT_DRAFT_TOKENS, QUANT_QKV_MODES
from ..runtime.sampling import MAX_DRAFT_TOKENS, SPECULATIVE

PRECISIONS = ("low", "high")
#: MNN's weight modes: int4 weights with int8 activations, or float weights
MEMORY_MODES = ("low", "normal", "high")
MAX_THREADS = 8
MIN_CONTEXT = 16
#: Ollama's default keep-alive (docs/api.md: "default: 5m")
DEFAULT_KEEP_ALIVE_S = 300.0
#: below this much RAM a device holds one model at a time (a phone: a 0.6B and a 4B model do not fit together)
SMALL_DEVICE_BYTES = 8 * 2**30
#: Ollama's default OLLAMA_MAX_LOADED_MODELS on a CPU (3 per GPU, 3 without one)
MOST_LOADED = 3


@dataclass(frozen=True)
class LoadOptions:
    """How to load a model; each field's help says what it does (``serve --help``
    prints the same words). A model's tuned preset and its ``models config``
    options go over these defaults (``engine.model_options``)."""

    backend: str = option("cpu", choices=BACKENDS, help="where the model runs (hexagon is experimental)")
    use_mmap: bool = option(True, aliases=("--mmap",), help=(
        "memory-map the weights from a cache in the store: the first load writes MNN's prepared weights there, "
        "later loads map them in tens of milliseconds and the weights stay reclaimable page cache"))
    precision: str = option("low", choices=PRECISIONS, help="MNN's arithmetic precision")
    threads: int = option(default_factory=default_threads, low=1, high=MAX_THREADS,
                          default_text="the performance cores this process may use, at most 4",
                          help="CPU threads")
    dynamic_option: int | None = option(None, low=0, high=8, help=(
        "MNN's dynamic_option: trades memory for speed in its low-memory int4/int8 kernels (none: MNN's "
        "own)"))
    quant_qkv: int | None = option(None, choices=QUANT_QKV_MODES, aliases=("--kv-quant",), why=BROKEN_QUANT_QKV,
                                   help=(
        "MNN's KV-cache quantisation: 0 off, 1 or 2 quantised keys (faster decode, slightly different "
        "outputs; the same results in MNN 3.6.1); 3 gives garbage text and 4 corrupts the heap, so both are "
        "refused"))
    context_length: int | None = option(None, low=MIN_CONTEXT, high=2**31 - 1, metavar="N",
                                        default_text="the model's config", help=(
        "tokens of context, prompt and answer together (MNN's max_all_tokens); fewer bounds the KV cache's "
        "memory"))
    prompt_cache: bool = option(True, help=(
        "keep the KV cache between generations and prefill only what changed (outputs are the same either way)"))
    memory: str | None = option(None, choices=MEMORY_MODES, default_text="the model's, usually low", help=(
        "MNN's weight mode: low (int4 weights, the fastest decode) or normal/high (float weights, several "
        "times the memory)"))
    speculative: str = option("auto", choices=("auto", *SPECULATIVE), help=(
        "speculative decoding: ngram drafts tokens by prompt lookup and verifies them in one forward, keeping "
        "only what the sampler draws; auto turns it on where it changes no token (float weights, and int4 "
        "where the load-time check proves the batch kernels exact); requests may override it"))
    draft_tokens: int = option(DEFAULT_DRAFT_TOKENS, low=1, high=MAX_DRAFT_TOKENS, metavar="N",
                               help="most draft tokens one verification checks")

    def validate(self) -> LoadOptions:
        """These options, or ``invalid_argument`` naming the first wrong one."""
        check(self)
        return self

    def mnn_config(self, cache_dir: Path) -> dict[str, Any]:
        """The MNN config keys these options set."""
        config: dict[str, Any] = {
            "backend_type": self.backend,
            "thread_num": self.threads,
            "precision": self.precision,
            "use_mmap": self.use_mmap,
            "tmp_path": str(cache_dir),
        }
        if self.dynamic_option is not None:
            config["dynamic_option"] = self.dynamic_option
        if self.quant_qkv is not None:
            config["quant_qkv"] = self.quant_qkv
        if self.context_length is not None:
            config["max_all_tokens"] = self.context_length
        if self.memory is not None:
            config["memory"] = self.memory
        return config

    def llm_arguments(self, cache_dir: Path) -> dict[str, Any]:
        """``Llm``'s keyword arguments for these options: the prompt cache, speculation and the MNN
        config keys (``mnn_config``). Every load builds its ``Llm`` from these, so none drops an option."""
        return {"prompt_cache": self.prompt_cache, "speculative": self.speculative,
                "draft_tokens": self.draft_tokens, **self.mnn_config(cache_dir)}

    def updated(self, overrides: Mapping[str, Any]) -> LoadOptions:
        """These options with ``overrides`` (field names) over them, checked:
        ``invalid_argument`` for an unknown name or a bad value."""
        try:
            return replace(self, **dict(overrides)).validate()
        except TypeError as exc:
            raise invalid("options", str(exc)) from exc


@dataclass(frozen=True)
class PoolSettings:
    """How many models the pool keeps loaded, and for how long (``ModelPool``'s arguments)."""

    max_loaded: int | None = option(None, low=1, metavar="N", default_text=(
        f"1 under {SMALL_DEVICE_BYTES // 2**30} GiB of RAM, else as many of the largest model as half the RAM "
        f"holds, at most {MOST_LOADED}"), help=(
        "models loaded at once; loading one more unloads the least recently used idle one"))
    keep_alive: float | None = option(DEFAULT_KEEP_ALIVE_S, parse=keep_alive_flag, metavar="DURATION",
                                      default_text="5m, as Ollama's", help=(
        "how long an idle model stays loaded (e.g. 5m, 1h, 300, 0, -1 for forever); a request's keep_alive "
        "wins"))
