"""``mnn_engine.Llm``: one MNN model, our generation loop, our sampler."""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import sys
import threading
import time
import weakref
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from .. import _mnn
from ..checks import choice, integer, invalid, is_number
from ..errors import MnnEngineError
from . import load_checks, media, structured
from .adapter_files import AdapterDir, read_adapter_dir
from .build import load_backend_library
from .embedding import EmbeddingInput, EmbeddingResult, embedding_inputs, template_wrap, vector_from
from .first_touch import check_in_child
from .generation import (
    GenerationResult,
    ModelClaim,
    PreparedGeneration,
    PromptCallback,
    ScoreResult,
    TokenCallback,
)
from .memory import give_back_memory, rss_bytes
from .model_files import ModelDir, capabilities, quantization_problem, read_model_dir
from .native_output import captured_native_output
from .prepared_cache import default_path_cache
from .prompt import (
    DEFAULT_ANSWER_RESERVE,
    ChatMessages,
    Message,
    Prompt,
    PromptCancelled,
    chat_messages,
    checked_ids,
    checked_prompt,
    fit_chat,
    fitting_ids,
)
from .sampling import INT32_MAX, MAX_TOP_LOGPROBS, GenerationConfig, is_valid_unicode
from .streaming import astream_pieces, stream_pieces
from .tokenizing import splits_exactly, tokenize_bounded

log = logging.getLogger("mnn_engine.llm")

_SAMPLER_DEFAULT_KEYS = (
    "temperature", "top_k", "top_p", "min_p",
    "repetition_penalty", "presence_penalty", "frequency_penalty",
)
DEFAULT_CONTEXT = 2048
#: The longest draft one speculative verification checks, by default
DEFAULT_DRAFT_TOKENS = 7
# what verification costs are measured over (a short, ordinary prompt)
_COST_PROBE_TEXT = "The quick brown fox jumps over the lazy dog, and then it runs home."
# MNN config keys that MNN reads as C ints
_INT_CONFIG_KEYS = frozenset({"max_all_tokens", "max_new_tokens", "thread_num", "prefill_chunk_size"})
# The MNN config key of patch 0002's switch (Interpreter::CPU_BATCH_INDEPENDENT_ROWS): off by default in
# libMNN, so every other program linking it computes as upstream MNN does; every model mnn-engine loads
# asks for it unless its config or the caller says false. MNN builds without the patch ignore the key.
BATCH_INDEPENDENT_ROWS = "batch_independent_rows"
# Token arrays sent to embed are this model's ids; the usual client that sends others is langchain's
# OpenAIEmbeddings, which tokenizes with tiktoken by default (its ids mean nothing to another model).
_FOREIGN_IDS_HINT = ("; token arrays are read as this model's own token ids, so they were probably made by "
                     "another tokenizer (langchain's OpenAIEmbeddings sends tiktoken's by default: pass "
                     "check_embedding_ctx_length=False to send text)")
# Markup tokens that reasoning and tool-call parsing rely on. MNN's tokenizer
# decodes added tokens to nothing, so their text is restored after load.
MARKUP_TOKENS = ("<think>", "</think>", "<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>")


def _rows_batch_independent(core: _mnn.LlmCore) -> bool:
    """Whether this MNN gives tokens inside a batch the logits (and KV) it
    gives them one forward at a time, bit for bit: what lossless speculative
    verification and reuse of any cached prefix need. True with our MNN patch
    (subprojects/packagefiles/MNN/0002-batch-independent-rows.patch) on the
    kernels it covers, with its switch on (``BATCH_INDEPENDENT_ROWS``, which
    load sets); an unpatched MNN (the PyPI wheel's), the switch off or another
    CPU's kernels say False, and then speculation stays off in int4 and the prompt
    cache keeps whole chunks. A model whose forwards do not give a row of
    logits per token says False too. Empties the prompt cache."""
    ids = core.tokenize(_COST_PROBE_TEXT)
    prompt, tail = ids[:4], ids[4:10]
    with captured_native_output():
        try:
            alone = _mnn.forward_rows(core, prompt, [[t] for t in tail])
            return all(_mnn.forward_rows(core, prompt, cuts) == alone
                       for cuts in ([tail[:2], tail[2:]], [tail[:1], tail[1:4], tail[4:]], [tail]))
        except RuntimeError as exc:  # forward_rows: MNN returned no logits, or not a row per token
            log.info("batch-exactness check: %s", exc)
            return False


def check_speculative(speculative: Any, draft_tokens: Any) -> None:
    """A model's speculative-decoding defaults: "auto", "ngram" or "off", and a draft length."""
    if speculative != "auto":
        GenerationConfig(speculative=speculative).validate()
    GenerationConfig(draft_tokens=draft_tokens).validate()


#: MNN's KV-cache quantisation modes that work in MNN 3.6.1 (``LoadOptions.quant_qkv`` takes the same)
QUANT_QKV_MODES = (0, 1, 2)
BROKEN_QUANT_QKV = "MNN's modes 3 and 4 are broken in MNN 3.6.1"


def check_quant_qkv(value: Any) -> None:
    """Refuse MNN KV-cache quantisation modes that are broken in MNN 3.6.1
    (3 gives garbage text on real models, 4 corrupts the heap on Qwen3-shaped
    ones), wherever the setting comes from."""
    choice(value, "quant_qkv", QUANT_QKV_MODES, nullable=True, why=BROKEN_QUANT_QKV)


def _close_core(core: _mnn.LlmCore) -> None:
    with captured_native_output():
        core.close()


class Llm:
    """An MNN large language model.

    ``Llm(path, **config_overrides)`` opens a model from its directory or its
    ``config.json``; the overrides (MNN config keys such as ``thread_num``,
    ``precision``, ``max_all_tokens``) are applied before loading. As
    ``serve`` does, the weights MNN prepares are kept in its mmap cache
    (``use_mmap`` in a ``tmp_path`` under the store's cache directory, by the
    model's path) and mapped by later loads; ``use_mmap=False`` or a
    ``tmp_path`` of your own says otherwise.
    The prompt cache (on by default; ``prompt_cache=False`` turns it off,
    ``cache_prompt=True/False`` per call) keeps the KV cache between
    generations and prefills only what a new prompt does not share with the
    previous one; ``GenerationResult.cached_tokens`` says how much was
    reused. It is exact: where MNN's rows do not depend on the batch they
    are computed in (``batch_exact``, checked at load: true with the MNN
    patch mnn-engine builds with) any shared prefix is kept, the previous
    answer's tokens included; elsewhere prompts are prefilled in chunks
    aligned to 64-token positions and only whole chunks are kept. Either way
    a prefill over the cache computes what a fresh prefill computes, bit for
    bit. ``load()``
    reads the weights and warms the model up; ``close()`` frees it (also at
    exit). Generation methods take the prompt as text (used as is), token ids,
    or chat messages (``[{"role": ..., "content": ...}]``, rendered with the
    model's chat template), and sampling keywords with OpenAI's names (see
    ``GenerationConfig``). One generation runs at a time per model.

    Speculative decoding (``speculative="ngram"``, or per call) drafts the
    next tokens by prompt lookup (what followed the last few tokens where
    they occurred earlier in the prompt or output) and verifies up to
    ``draft_tokens`` of them in one forward. A draft token is kept only when
    the sampler, drawing at that position with the same random stream,
    penalties, biases and grammar, draws it: the choice rule is plain
    decoding's. How many drafts to verify follows the measured cost of a
    verification (``verify_costs``, measured at load or at first use, and
    kept with the prepared weights for later loads: ``load_checks``) and
    the acceptance so far; drafting pauses when it does not pay. The
    logits of a verification come from MNN's batched kernels. Where
    ``batch_exact`` holds they are the single-token kernels' bit for bit, and
    the output is plain decoding's, token for token and in log-probabilities.
    An unpatched MNN (the PyPI wheel's) quantises a batch's activations
    differently in the int4 low-memory mode (``memory`` "low", most models'
    default), so outputs would drift from plain decoding's within tens of
    tokens. Hence the default ``speculative="auto"``: on where
    ``batch_exact`` holds or the weights are float (``memory`` "normal" or
    "high": there the rows differ in their last bits only), else off
    (``speculative_default`` says which); see docs/benchmarks.md.

    A text-embedding model (``kind == "embedding"``: its graph outputs
    sentence embeddings) takes ``embed()`` instead of the generation methods.

    ``with_adapter(dir)`` runs a LoRA adapter over a loaded chat model (see
    ``mnn_engine.runtime.adapter_files``): another ``Llm``, sharing this
    one's weights, with caches of its own.
    """

    def __init__(self, model: str | os.PathLike[str] | ModelDir, *, prompt_cache: bool = True,
                 speculative: str = "auto", draft_tokens: int = DEFAULT_DRAFT_TOKENS,
                 **config_overrides: Any) -> None:
        #: the model's directory as read and validated once (a store's reading is taken as given, unless stale)
        self.model_files = model if isinstance(model, ModelDir) and not model.is_stale() else read_model_dir(
            model.config_path if isinstance(model, ModelDir) else model)
        self.config_path = self.model_files.config_path
        self.model_dir = self.model_files.path
        self.file_config = self.model_files.config
        #: "chat" for a language model, "embedding" for a text-embedding model
        self.kind = self.model_files.kind
        try:
            json.dumps(config_overrides)
        except (TypeError, ValueError) as exc:
            raise invalid("config_overrides", f"must be JSON-serialisable: {exc}") from exc
        check_quant_qkv({**self.file_config, **config_overrides}.get("quant_qkv"))
        for key in _INT_CONFIG_KEYS & config_overrides.keys():
            integer(config_overrides[key], key, low=1, high=INT32_MAX)
        self.config_overrides = dict(config_overrides)
        #: Reuse the KV cache across generations by default (GenerationConfig.cache_prompt decides per call).
        self.prompt_cache = prompt_cache
        check_speculative(speculative, draft_tokens)
        #: Speculative decoding by default: "auto", "ngram" or "off" (GenerationConfig.speculative decides per call)
        self.speculative = speculative
        #: what "auto" resolved to at load ("ngram" or "off")
        self.speculative_default = "off"
        #: MNN computes a token's logits and KV the same alone and in any batch (checked at load)
        self.batch_exact = False
        # the MNN config load() sets: the overrides and the default prepared-weights cache
        self._mnn_overrides: dict[str, Any] | None = None
        self.draft_tokens = draft_tokens
        #: cost of a verifying forward over 1, 2, ... tokens relative to one token (empty until measured)
        self.verify_costs: list[float] = []
        self._verify_serially = False  # test hook: verify drafts with single-token forwards
        self._core: _mnn.LlmCore | None = None
        #: what is computed once per loaded model (e.g. the grammar engine's tokenizer); emptied by load and close
        self.load_cache: dict[str, Any] = {}
        self._finalizer: weakref.finalize | None = None
        # _state_lock orders load/close; every native call pins the core
        # (_pins), and close() frees the core only when the last pin is
        # taken out; _generation_lock admits one generation at a time. (A
        # pin is the core's; a claim, ModelClaim, is one generation's; a
        # lease, engine.pool.Lease, is one request's hold on a served model.)
        self._generation_lock = threading.Lock()
        self._state_lock = threading.RLock()
        self._template_lock = threading.Lock()
        self._pins = 0
        self._generating_thread: int | None = None  # the thread inside the native loop (its callbacks run there)
        self._pins_cond = threading.Condition()
        self._vocab_size = 0
        self._context_length = DEFAULT_CONTEXT
        self._sampling_defaults: dict[str, Any] = {}
        self._template_context: dict[str, Any] = {}
        self._chat_template: str | None = None
        self._template_tokens: dict[str, str | None] = {"bos_token": None, "eos_token": None}
        self._max_token_bytes = 1
        self._exact_cuts = False
        self._embedding_wrap: tuple[str, str] | None = None
        #: MNN holds an image or audio text's encoder output that no forward has taken yet (``_encode``)
        self._media_pending = False
        self.embedding_dim = 0  # of an embedding model's vectors
        #: a LoRA adapter's handle: the model it runs over and what was read of it (None: a model of its own)
        self.base: Llm | None = None
        self.adapter: AdapterDir | None = None
        #: an adapter's: what the process's RSS grew by when it was made (its factors, its KV cache and
        #: MNN's buffers for its graph; the base's weights are shared), measured then
        self.adapter_bytes = 0
        self._adapters: weakref.WeakSet[Llm] = weakref.WeakSet()
        self.last_result: GenerationResult | None = None
        self.load_seconds = 0.0  # of the last load(): MNN reading the model, without the warm-up forward
        self.warmup_seconds = 0.0

    # ------------------------------------------------------------------ lifecycle
    def load(self) -> Llm:
        """Load the weights and run one short warm-up forward. Idempotent.
        The first load of each version of the files runs in a child process
        first (``mnn_engine.runtime.first_touch``): damaged files give
        ``invalid_model`` instead of killing this process."""
        with self._state_lock:
            if self._core is not None:
                return self
            self._mnn_overrides = self._with_default_cache(self.config_overrides)
            check_in_child(self.config_path, self.model_files.files, self._mnn_overrides)
            return self.load_in_this_process()

    def _with_default_cache(self, overrides: dict[str, Any]) -> dict[str, Any]:
        """``overrides`` and, unless they or the model's config say otherwise,
        MNN's mmap cache of prepared weights (``use_mmap`` in a ``tmp_path``
        under the store's cache, by the model's path): what ``serve`` loads
        with, so a warm ``Llm(path)`` load maps them instead of repacking
        (``load()`` only: a first-touch child, the store's import check
        among them, loads with exactly the overrides it is given)."""
        overrides = self._mappable(overrides)
        if {"use_mmap", "tmp_path"} & ({*self.file_config, *overrides}):
            return overrides
        try:
            cache = default_path_cache(self.model_files)
        except OSError as exc:  # a read-only home: load without the cache
            log.info("no prepared-weights cache for %s: %s", self.model_dir, exc)
            return overrides
        return {**overrides, "use_mmap": True, "tmp_path": str(cache)}

    def _mappable(self, overrides: dict[str, Any]) -> dict[str, Any]:
        """``overrides`` without ``use_mmap`` where MNN 3.6.1 crashes on a warm
        load of its own cache: float weights (memory "normal"/"high": a
        segfault in ConvolutionCommon::load) and audio models (a SIGFPE)."""
        given = {**self.file_config, **overrides}
        unmappable = (f"memory {given.get('memory')!r}" if given.get("memory", "low") != "low"
                      else "an audio model" if given.get("is_audio") else None)
        if unmappable is None:
            return dict(overrides)
        if given.get("use_mmap"):  # (serve asks for it by default: said once per load, not as a warning)
            log.info("use_mmap is ignored with %s: MNN 3.6.1 crashes on a warm load of that cache", unmappable)
        return {**overrides, "use_mmap": False}

    def load_in_this_process(self) -> Llm:
        """``load()`` without the child-process check (the first-touch child itself uses it)."""
        with self._state_lock:
            if self._core is not None:
                return self
            started = time.perf_counter()
            if self._mnn_overrides is None:  # (load() sets it; a first-touch child comes here directly)
                self._mnn_overrides = self._mappable(self.config_overrides)
            overrides = self._mnn_overrides
            if BATCH_INDEPENDENT_ROWS not in {**self.file_config, **overrides}:
                overrides = {**overrides, BATCH_INDEPENDENT_ROWS: True}
            load_backend_library(str({**self.file_config, **overrides}.get("backend_type", "cpu")))
            with captured_native_output() as lines:
                core = _mnn.LlmCore(str(self.config_path), embedding=self.kind == "embedding")
                core.native_capture = captured_native_output  # (MNN prints when a generation meets a new length)
                core.set_config(json.dumps(overrides))
                ok = core.load()
            loaded = time.perf_counter()
            if not ok:
                _close_core(core)
                detail = "; ".join(lines) or "no message from MNN"
                raise MnnEngineError("model_load_failed", f"MNN could not load {self.config_path}: {detail}")
            self._adopt(core, overrides, loaded - started)
            return self

    def _adopt(self, core: _mnn.LlmCore, overrides: dict[str, Any], load_seconds: float) -> None:
        """Take a loaded core: read what it says of itself, warm it up, run the load checks."""
        with self._state_lock:
            if not core.embedding:
                # generate_init then keeps the KV cache; the loop resets it when it cannot be reused
                core.set_config(json.dumps({"reuse_kv": True}))
            loaded = time.perf_counter()
            self._core = core
            self.load_cache.clear()
            self._finalizer = weakref.finalize(self, _close_core, core)
            config = json.loads(core.dump_config())
            jinja = config.get("jinja") if isinstance(config.get("jinja"), dict) else {}
            self._template_context = dict(jinja.get("context") or {})
            self._chat_template = jinja.get("chat_template")
            self._template_tokens = {"bos_token": jinja.get("bos"), "eos_token": jinja.get("eos")}
            if core.embedding:
                self._vocab_size = _embedding_rows(self.model_files)
                self._embedding_wrap = template_wrap(self._chat_template)
                self.embedding_dim = len(core.embed(core.tokenize("Hi"))) // 4  # the warm-up
            else:
                self._vocab_size = core.vocab_size()  # one short forward: the warm-up
            self.load_seconds = load_seconds
            self.warmup_seconds = time.perf_counter() - loaded
            context = config.get("max_all_tokens", DEFAULT_CONTEXT)
            self._context_length = context if isinstance(context, int) and context > 1 else DEFAULT_CONTEXT
            self._sampling_defaults = _sampler_defaults(config)
            self._restore_markup_tokens(core)
            self._max_token_bytes = max(1, core.max_token_bytes(self._vocab_size))
            self._exact_cuts = splits_exactly(core.tokenize)
            self._run_load_checks(core, {**self.file_config, **overrides}, config.get("memory", "low") == "low")
            log.info("loaded %s (%s model, vocab %d, context %d)", self.config_path, self.kind, self._vocab_size,
                     self._context_length)
            problem = quantization_problem(self.model_dir, self.file_config)
            if problem:
                log.warning("%s", problem)

    def with_adapter(self, adapter: str | os.PathLike[str]) -> Llm:
        """This loaded chat model with the LoRA adapter at ``adapter`` (its
        directory or its ``lora.mnn``) applied: a new ``Llm``, loaded, whose
        graph runs on this model's weights (MNN's ``Llm::create_lora``
        shares them: the adapter costs its factors and a KV cache of its own,
        not a second model). It generates, scores and tokenizes as this model
        does, with its own prompt cache; ``base`` is this model and
        ``adapter`` what was read of the adapter (its rank and scale: MNN has
        no runtime strength, ``ModelStore.set_adapter_scale`` rescales the
        graph). Closing it leaves this
        model loaded; closing this model closes its adapters first.
        ``invalid_model`` (naming the adapter) for one that is damaged or was
        exported over another model, checked before MNN reads it; ``busy``
        while this model generates (MNN reads its module to make the adapter's)."""
        self.require_kind("chat")
        files = read_adapter_dir(adapter, self.model_files)
        handle = Llm(self.model_files, prompt_cache=self.prompt_cache, speculative=self.speculative,
                     draft_tokens=self.draft_tokens, **self.config_overrides)
        handle.base, handle.adapter = self, files
        # MNN joins the graph's name to the base's directory, as it joins every file the config names
        relative = os.path.relpath(files.graph, self.model_dir)
        with self._state_lock, self._exclusive() as core:  # (``busy`` while this model generates)
            give_back_memory()
            before = rss_bytes()
            started = time.perf_counter()
            with captured_native_output() as lines:
                adapted = core.create_adapter(relative)
            if adapted is None:
                detail = "; ".join(lines) or "no message from MNN"
                raise MnnEngineError("model_load_failed", f"MNN could not create adapter {files.path}: {detail}",
                                     param="adapter")
            adapted.native_capture = captured_native_output
            handle._adopt(adapted, self._mnn_overrides or {}, time.perf_counter() - started)
            give_back_memory()
            handle.adapter_bytes = max(0, rss_bytes() - before)
            self._adapters.add(handle)
        log.info("adapter %s over %s (%s factor weights, %.1f MiB)", files.path, self.model_dir, files.parameters,
                 handle.adapter_bytes / 2**20)
        return handle

    def _run_load_checks(self, core: _mnn.LlmCore, mnn_config: dict[str, Any], low_memory: bool) -> None:
        """Set ``batch_exact``, ``speculative_default`` and ``verify_costs``:
        measured, or read from the prepared-weights directory where an earlier
        load with the same model files, engine, CPU and config kept them
        (``load_checks``). MNN then builds each verification length's module
        when a generation first needs it; the loop captures what MNN prints
        about it with ``core.native_capture``, for the log."""
        self.verify_costs = []
        self.batch_exact = False
        self.speculative_default = self.speculative
        if self.kind != "chat":
            return
        # (an adapter's verdicts are its own: the base's kept ones are not read for it)
        cache_dir = Path(mnn_config["tmp_path"]) if isinstance(mnn_config.get("tmp_path"), str) \
            and self.adapter is None else None
        key = load_checks.checks_key(self.model_files.stamp, mnn_config, self.draft_tokens) if cache_dir else ""
        kept = load_checks.read_checks(cache_dir, key) if cache_dir else None
        self.batch_exact = kept["batch_exact"] if kept else _rows_batch_independent(core)
        core.exact_reuse = self.batch_exact
        if self.speculative == "auto":
            # int4 low-memory weights: only where a batch's rows are a lone row's, bit for bit
            self.speculative_default = "ngram" if self.batch_exact or not low_memory else "off"
        costs = kept["verify_costs"] if kept else []
        measured = kept is None
        if self.speculative_default == "ngram":
            if len(costs) == self.draft_tokens + 1:
                self.verify_costs = costs
                core.set_verify_costs(costs)
            else:  # (an earlier load with speculation off kept the verdict only)
                self._measure_verify_costs(core, self.draft_tokens)
                costs, measured = self.verify_costs, True
        if cache_dir and measured:
            load_checks.write_checks(cache_dir, key, self.batch_exact, costs)

    def _measure_verify_costs(self, core: _mnn.LlmCore, draft_tokens: int) -> None:
        """Time decode forwards over 1..draft_tokens+1 tokens (this also has
        MNN build its module for each length, which it announces on stdout:
        captured here rather than mid-generation) and give the ratios to the
        loop. Empties the prompt cache."""
        ids = core.tokenize(_COST_PROBE_TEXT)
        with captured_native_output():
            times = _mnn.forward_costs(core, ids, list(range(1, draft_tokens + 2)), 3)
        # A longer verification does all a shorter one does, and noise only adds time: so no length costs
        # more than the least measured for any longer one (which also keeps the costs non-decreasing).
        least = [min(times[i:]) for i in range(len(times))]
        self.verify_costs = [round(t / least[0], 4) for t in least] if least and least[0] > 0 else []
        core.set_verify_costs(self.verify_costs)
        log.info("speculative decoding: verification costs %s", self.verify_costs)

    @staticmethod
    def _restore_markup_tokens(core: _mnn.LlmCore) -> None:
        for markup in MARKUP_TOKENS:
            ids = core.tokenize(markup)
            if len(ids) == 1 and core.token_bytes(ids[0]) == b"":
                core.set_token_text(ids[0], markup.encode())

    def close(self) -> None:
        """Free the model. Safe to call twice, and while nothing is loaded. A
        running generation is cancelled and finishes its token first. From
        inside a generation's own callback it raises ``invalid_argument``: it
        would wait for that generation to end, which waits for the callback."""
        if self._generating_thread == threading.get_ident():
            raise invalid("close", f"{self.model_dir.name}: called from inside this model's own generation callback, "
                          "which close would wait for forever: close the model after the generation returns")
        for adapter in list(self._adapters):  # they run on this model's weights: closed first
            adapter.close()
        with self._state_lock:
            with self._pins_cond:
                core, self._core = self._core, None
            if core is None:
                return
            self.load_cache.clear()
            core.cancel()
            with self._pins_cond:
                self._pins_cond.wait_for(lambda: self._pins == 0)
            if self._finalizer is not None:
                self._finalizer()
                self._finalizer = None

    def __enter__(self) -> Llm:
        return self.load()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def forget_prompt_cache(self) -> None:
        """Drop what the prompt cache holds: the next generation prefills everything."""
        core = self._core
        if core is not None:
            core.forget()

    @property
    def held_tokens(self) -> int:
        """Token ids the KV cache holds for the prompt cache (0 when none)."""
        core = self._core
        return core.held_tokens if core is not None else 0

    @property
    def is_loaded(self) -> bool:
        return self._core is not None

    @property
    def vocab_size(self) -> int:
        return self._vocab_size

    @property
    def context_length(self) -> int:
        """Most tokens (prompt + output) one generation may hold (MNN's ``max_all_tokens``)."""
        return self._context_length

    @property
    def context_limit(self) -> int:
        """The older name of ``context_length``."""
        return self._context_length

    @property
    def capabilities(self) -> list[str]:
        """What this model can do, as Ollama names them (``model_files.capabilities``)."""
        return capabilities(self.kind, self.file_config)

    @property
    def sampling_defaults(self) -> dict[str, Any]:
        """The model's own sampler settings, used for options left unset."""
        return dict(self._sampling_defaults)

    def _pin(self) -> _mnn.LlmCore:
        """The core, kept alive until the matching _unpin()."""
        with self._pins_cond:
            core = self._core
            if core is None:
                raise MnnEngineError("model_not_loaded", f"{self.model_dir.name}: call load() first")
            self._pins += 1
            return core

    def _unpin(self) -> None:
        with self._pins_cond:
            self._pins -= 1
            if self._pins == 0:
                self._pins_cond.notify_all()

    @contextlib.contextmanager
    def _using(self) -> Iterator[_mnn.LlmCore]:
        core = self._pin()
        try:
            yield core
        finally:
            self._unpin()

    # ------------------------------------------------------------------ text
    def tokenize(self, text: str, *, limit: int | None = None) -> list[int]:
        """Token ids of ``text`` (special tokens in the text are recognised).
        Long text is handed to MNN in segments, so the time stays linear in
        its length (see ``mnn_engine.runtime.tokenizing``). With ``limit``, text of
        more tokens is ``context_length_exceeded`` (tokenizing stops there)."""
        if not isinstance(text, str):
            raise invalid("text", "must be a string")
        with self._using() as core:
            ids = self._encode(core, text, sys.maxsize if limit is None else limit, _never)
        if ids is None:
            raise MnnEngineError("context_length_exceeded", f"the text has more than {limit} tokens",
                                 param="content")
        return ids

    def tokenizer_info(self) -> dict[str, Any]:
        """The tokenizer's special tokens and chat template, as the model's export records them
        (``llm_config.json``'s ``jinja``: the Hugging Face tokenizer's ``bos_token`` and ``eos_token``;
        None where it has none), and the context length."""
        return {**self._template_tokens, "chat_template": self._chat_template,
                "model_max_length": self.context_length}

    def detokenize_bytes(self, token_ids: Sequence[int]) -> bytes:
        """Raw bytes of the tokens (a token may hold part of a UTF-8 character)."""
        ids = self.checked_ids(token_ids, "token_ids")
        with self._using() as core:
            return core.detokenize(ids)

    def token_bytes(self, token_id: int) -> bytes:
        """Raw bytes of one token."""
        return self.detokenize_bytes([token_id])

    def vocabulary(self) -> tuple[list[bytes], list[int]]:
        """Every token's bytes, by id, and the ids that end a generation."""
        with self._using() as core:
            n = self._vocab_size
            return [core.token_bytes(i) for i in range(n)], [i for i in range(n) if core.is_stop(i)]

    def detokenize(self, token_ids: Sequence[int]) -> str:
        """Text of the tokens; incomplete UTF-8 at the end becomes U+FFFD."""
        return self.detokenize_bytes(token_ids).decode("utf-8", "replace")

    def apply_chat_template(
        self,
        messages: Sequence[Message],
        add_generation_prompt: bool = True,
        enable_thinking: bool | None = None,
        tools: Sequence[Mapping[str, Any]] | None = None,
    ) -> str:
        """Render chat messages with the model's template.

        ``enable_thinking`` and ``tools`` go into the template's context (as
        Qwen3-style templates expect); ``None`` keeps the model's default.
        """
        pairs = chat_messages(messages).pairs
        context = dict(self._template_context)
        # set_config merges, so every key we ever set must be set each time
        if enable_thinking is not None:
            context["enable_thinking"] = bool(enable_thinking)
        else:
            context.setdefault("enable_thinking", None)
        context["tools"] = list(tools) if tools else None
        jinja: dict[str, Any] = {"context": context}
        if not add_generation_prompt and self._chat_template:
            jinja["chat_template"] = "{%- set add_generation_prompt = false -%}" + self._chat_template
        with self._using() as core, self._template_lock, captured_native_output() as lines:
            core.set_config(json.dumps({"jinja": jinja}))
            try:
                text = core.apply_chat_template(pairs)
            finally:
                if "chat_template" in jinja:
                    core.set_config(json.dumps({"jinja": {"chat_template": self._chat_template}}))
        if not text:
            detail = "; ".join(lines) or "it rendered nothing"
            raise MnnEngineError("invalid_model", f"the model's chat template failed: {detail}",
                                 param="chat_template")
        return text

    def prompt_ids(self, prompt: Prompt, *, enable_thinking: bool | None = None,
                   tools: Sequence[Mapping[str, Any]] | None = None) -> list[int]:
        """Token ids for a prompt given as text, token ids or chat messages.
        ``enable_thinking`` and ``tools`` go into the chat template, so they
        need chat messages."""
        prompt = self.check_prompt(prompt, enable_thinking=enable_thinking, tools=tools)
        with self._using() as core:
            return self._prompt_ids(core, prompt, enable_thinking, tools, cancellable=False)[1]

    def check_prompt(self, prompt: Prompt, *, enable_thinking: bool | None = None,
                     tools: Sequence[Mapping[str, Any]] | None = None) -> Prompt:
        """The checks on a prompt that take no tokenizing (milliseconds even
        for megabytes): its shape, and text too long to fit in the context
        whatever its tokens (``context_length_exceeded``). Returns the prompt
        checked (chat messages as ``ChatMessages``, token ids as a list)."""
        return checked_prompt(prompt, enable_thinking=enable_thinking, tools=tools, vocab_size=self._vocab_size,
                              max_token_bytes=self._max_token_bytes, context_length=self._context_length)

    def _prompt_ids(self, core: _mnn.LlmCore, prompt: Prompt, enable_thinking: bool | None,
                    tools: Any, cancellable: bool = True, overflow: str = "error",
                    reserve: int = 0) -> tuple[str | None, list[int], int]:
        """The rendered text (None for token ids), the ids of a checked prompt
        and how many messages were dropped to fit it. Tokenizing stops once
        the ids cannot fit in the context, or, when ``cancellable`` (a
        generation's own prompt), at a cancel. With ``overflow="truncate"``
        the oldest messages after the system prompt are dropped, whole,
        until the prompt and ``reserve`` tokens for the answer fit."""
        cancelled = core.cancel_requested if cancellable else _never
        if isinstance(prompt, ChatMessages):
            def render(messages: Sequence[Message]) -> str:
                return self.apply_chat_template(messages, True, enable_thinking, tools)

            if overflow == "truncate":
                return fit_chat(prompt, render, lambda text, limit: self._tokens_within(core, text, limit, cancelled),
                                self._context_length, reserve)
            text = render(prompt)
        elif isinstance(prompt, str):
            text = prompt
        else:
            return None, fitting_ids(list(prompt), self._context_length), 0
        return text, fitting_ids(self._tokens_within(core, text, self._context_length - 1, cancelled),
                                 self._context_length), 0

    def _encode(self, core: _mnn.LlmCore, text: str, limit: int, cancelled: Callable[[], bool]) -> list[int] | None:
        """The one way text reaches MNN's tokenizer: media tags are guarded
        first (``mnn_engine.runtime.media``: MNN opens the file a tag names), then the
        text is tokenized in segments; None when it has more than ``limit`` ids.

        Text with images or audio goes to MNN in one call (its tokenizer
        computes the multimodal RoPE positions per call), and MNN's
        encoder output of an earlier such text that was never generated from
        is dropped first (``LlmCore.drop_media``)."""
        guarded = media.guard(text)
        if not media.has_media(guarded):
            return tokenize_bounded(core.tokenize, guarded, limit=limit, exact_cuts=self._exact_cuts,
                                    cancelled=cancelled)
        media.check_files(guarded)
        if self._media_pending:
            core.drop_media()
        self._media_pending = True  # until a generation's forward takes the embeddings
        return tokenize_bounded(core.tokenize, guarded, limit=limit, exact_cuts=False, cancelled=cancelled)

    def _tokens_within(self, core: _mnn.LlmCore, text: str, limit: int,
                       cancelled: Callable[[], bool]) -> list[int] | None:
        """The ids of ``text``, or None when there are more than ``limit``."""
        ids = self._encode(core, text, limit, cancelled)
        if ids is None and cancelled():
            raise PromptCancelled
        return ids

    def checked_ids(self, token_ids: Sequence[int], param: str, hint: str = "") -> list[int]:
        """Token ids as a list, each an integer inside this model's vocabulary."""
        return checked_ids(token_ids, self._vocab_size, param, hint)

    # ------------------------------------------------------------------ generation
    def generate(
        self,
        prompt: Prompt,
        callback: TokenCallback | None = None,
        *,
        config: GenerationConfig | None = None,
        enable_thinking: bool | None = None,
        tools: Sequence[Mapping[str, Any]] | None = None,
        tool_choice: Any = None,
        **sampling: Any,
    ) -> GenerationResult:
        """Generate a completion; ``callback(piece)`` receives each piece of
        text as it is produced (always whole UTF-8 characters; stop strings
        never appear). An exception raised by the callback stops the
        generation and is re-raised here. ``tool_choice`` ``"required"`` or
        ``{"type": "function", "function": {"name": ...}}`` makes the answer
        one call of an offered tool whose arguments fit its parameters
        (structured output); ``"auto"``/``"none"``/None leave it free."""
        run = self._prepare(prompt, config, enable_thinking, tools, sampling, tool_choice)
        return run.run(callback)

    def stream(self, prompt: Prompt, **kwargs: Any) -> Iterator[str]:
        """Yield pieces of text as they are generated (a generation thread
        feeds them). Closing the iterator, or KeyboardInterrupt while it
        waits, cancels the generation. The result is in ``last_result``."""
        run = self._prepare_kwargs(prompt, kwargs)
        yield from stream_pieces(lambda put: self._spawn(run, put), self.cancel)

    async def astream(self, prompt: Prompt, **kwargs: Any) -> AsyncIterator[str]:
        """``stream()`` for asyncio: the generation runs on a worker thread and
        never blocks the event loop; cancelling the consumer cancels it."""
        run = self._prepare_kwargs(prompt, kwargs)
        async for piece in astream_pieces(lambda put: self._spawn(run, put), self.cancel):
            yield piece

    def _spawn(self, run: PreparedGeneration, callback: TokenCallback) -> Future[GenerationResult]:
        """Run a prepared generation on a new thread."""
        future: Future[GenerationResult] = Future()

        def work() -> None:
            try:
                future.set_result(run.run(callback))
            except BaseException as exc:
                future.set_exception(exc)

        threading.Thread(target=work, name="mnn-engine-generation", daemon=True).start()
        return future

    def cancel(self) -> None:
        """Stop the running generation before its next token (any thread)."""
        core = self._core
        if core is not None:
            core.cancel()

    def prepare(self, prompt: Prompt, **kwargs: Any) -> PreparedGeneration:
        """Check a generation and claim the model for it, without starting it
        (``generate``'s arguments): errors and ``busy`` surface here, in the
        caller's thread; rendering and tokenizing happen in ``run()``."""
        return self._prepare_kwargs(prompt, kwargs)

    def _prepare_kwargs(self, prompt: Prompt, kwargs: dict[str, Any]) -> PreparedGeneration:
        config = kwargs.pop("config", None)
        enable_thinking = kwargs.pop("enable_thinking", None)
        tools = kwargs.pop("tools", None)
        tool_choice = kwargs.pop("tool_choice", None)
        prefix_ids = kwargs.pop("prefix_ids", ())
        return self._prepare(prompt, config, enable_thinking, tools, kwargs, tool_choice, prefix_ids)

    def _prepare(self, prompt: Prompt, config: GenerationConfig | None,
                 enable_thinking: bool | None, tools: Any, sampling: dict[str, Any],
                 tool_choice: Any = None, prefix_ids: Sequence[int] = ()) -> PreparedGeneration:
        """Validate what takes no tokenizing and claim the model, so errors
        (and ``busy``) surface in the caller's thread at once. Rendering and
        tokenizing the prompt happen in _run, on the generating thread, which
        gives the claim back. ``prefix_ids`` come before the prompt's own ids
        (an earlier exchange's tokens, continued: Ollama's ``context``)."""
        self.require_kind("chat")
        gen = GenerationConfig.from_kwargs(config, **sampling)
        prompt = self.check_prompt(prompt, enable_thinking=enable_thinking, tools=tools)
        settings = gen.resolved(self._sampling_defaults, self._vocab_size)
        settings.seed = gen.effective_seed()
        settings.stop = gen.stop
        settings.max_tokens = -1 if gen.max_tokens is None else gen.max_tokens
        settings.context_length = self._context_length
        settings.ignore_eos = gen.ignore_eos
        settings.verify_serially = self._verify_serially
        grammar = structured.grammar_for(gen.response_format, gen.grammar, tools, tool_choice)
        if isinstance(prefix_ids, (str, bytes)) or not isinstance(prefix_ids, Sequence):
            raise invalid("context", "must be a list of token ids")
        prefix = tuple(self.checked_ids(prefix_ids, "context"))
        return PreparedGeneration(self.claim(), prompt, enable_thinking, tools, gen, settings, grammar, prefix,
                                  self._run)

    def _run(self, run: PreparedGeneration, callback: TokenCallback | None,
             on_prompt: PromptCallback | None = None) -> GenerationResult:
        """Run a prepared generation (``PreparedGeneration.run``); gives its claim back.
        ``on_prompt`` receives the rendered prompt text, the number of
        dropped messages and the prompt's token count before the first token."""
        settings, config = run.settings, run.config
        try:
            dropped = 0
            try:
                reserve = config.max_tokens if config.max_tokens and config.max_tokens > 0 else \
                    DEFAULT_ANSWER_RESERVE
                text, ids, dropped = self._prompt_ids(run.core, run.prompt, run.enable_thinking, run.tools,
                                                      overflow=config.context_overflow, reserve=reserve)
                if run.prefix_ids:
                    ids = fitting_ids([*run.prefix_ids, *ids], self._context_length)
                # compiled here, on the generating thread: a big schema takes a while
                constraint = structured.Constraint(self, *run.grammar) if run.grammar else None
            except PromptCancelled:
                outcome, ids = _mnn.GenerationOutcome(), []
            else:
                if on_prompt is not None:
                    on_prompt(text, dropped, len(ids))
                settings.draft_tokens = self._draft_tokens(run.core, config)
                # Images and audio: their placeholder ids do not tell one picture from another, so such
                # prompts neither reuse the KV cache nor leave it to be reused.
                with_media = text is not None and media.has_media(text)
                settings.reuse = (self.prompt_cache if config.cache_prompt is None else config.cache_prompt) \
                    and not with_media
                settings.whole_prefill = with_media
                self._generating_thread = threading.get_ident()
                try:
                    outcome = run.core.generate(ids, settings, callback, constraint)
                finally:
                    self._generating_thread = None
                if with_media and outcome.prompt_tokens:  # its prefill took the embeddings
                    self._media_pending = False
                if with_media:
                    run.core.forget()
        finally:
            run.claim.release()
        result = GenerationResult.from_outcome(outcome, settings.seed, dropped, tuple(ids))
        self.last_result = result
        if result.finish_reason == "error":
            log.error("generation failed: %s", result.error)
        return result

    def _draft_tokens(self, core: _mnn.LlmCore, config: GenerationConfig) -> int:
        """The longest draft this generation verifies (0: plain decoding);
        verification costs are measured first if not yet for that length."""
        if (config.speculative or self.speculative_default) != "ngram":
            return 0
        draft_tokens = config.draft_tokens or self.draft_tokens
        if core.max_draft < draft_tokens:
            self._measure_verify_costs(core, draft_tokens)
        return draft_tokens

    def _inject_failure(self, after_tokens: int) -> None:
        """Test hook: the next generation fails inside the loop after this many tokens."""
        with self._using() as core:
            _mnn.inject_failure(core, after_tokens)

    def claim(self) -> ModelClaim:
        """Claim the model for one run (a generation, scoring or embedding):
        ``busy`` at once if another holds it, the one place where "one
        generation at a time" is enforced. A cancel from then on applies to
        the claimer's run. ``release()`` the claim (or use it in ``with``)."""
        core = self._pin()
        if not self._generation_lock.acquire(blocking=False):
            self._unpin()
            raise MnnEngineError("busy", "a generation is already running on this model")
        core.clear_cancel()

        def give_back() -> None:
            self._generation_lock.release()
            self._unpin()

        return ModelClaim(core, give_back)

    @contextlib.contextmanager
    def _exclusive(self, claim: ModelClaim | None = None) -> Iterator[_mnn.LlmCore]:
        """The core, claimed (``busy`` if a generation runs); a claim taken earlier is used, and given back."""
        with claim or self.claim() as held:
            yield held.core

    # ------------------------------------------------------------------ scoring
    def score(self, prompt: Prompt, continuation: str | Sequence[int], *, top_logprobs: int = 0,
              claim: ModelClaim | None = None) -> ScoreResult:
        """How likely the model finds ``continuation`` after ``prompt``: the
        log-probability of each continuation token given everything before it
        (teacher forcing, one forward per token; no sampling), and with
        ``top_logprobs`` (0..20) the most likely tokens at each position.
        ``prompt`` is text, token ids or chat messages; ``continuation`` text
        or token ids. ``cancel()`` stops it (``cancelled`` is then set and no
        scores are returned). For evaluation, e.g. perplexity. With ``claim``
        (taken earlier with ``claim()``), that claim is used and given back."""
        try:
            prompt_ids, target_ids = self._score_inputs(prompt, continuation, top_logprobs)
        except BaseException:
            if claim is not None:
                claim.release()
            raise
        with self._exclusive(claim) as core:
            scored = core.score(prompt_ids, target_ids, top_logprobs)
        if scored is None:
            raise MnnEngineError("generation_failed", "MNN returned no float32 logits while scoring")
        logprobs, tops = scored
        return ScoreResult(tuple(target_ids), tuple(logprobs), cancelled=not logprobs,
                           top=tuple(tuple(position) for position in tops) if top_logprobs else (),
                           prompt_tokens=len(prompt_ids))

    def _score_inputs(self, prompt: Prompt, continuation: str | Sequence[int],
                      top_logprobs: int) -> tuple[list[int], list[int]]:
        self.require_kind("chat")
        integer(top_logprobs, "top_logprobs", low=0, high=MAX_TOP_LOGPROBS)
        prompt_ids = self.prompt_ids(prompt)
        if isinstance(continuation, str):
            target_ids = self.tokenize(continuation)
        elif isinstance(continuation, Sequence) and not isinstance(continuation, (bytes, bytearray)):
            target_ids = self.checked_ids(continuation, "continuation")
        else:
            raise invalid("continuation", "must be text or a list of token ids")
        if not target_ids:
            raise invalid("continuation", "has no tokens")
        if len(prompt_ids) + len(target_ids) > self._context_length:
            raise MnnEngineError("context_length_exceeded",
                                 f"prompt and continuation have {len(prompt_ids) + len(target_ids)} tokens; "
                                 f"the context holds {self._context_length}", param="continuation")
        return prompt_ids, target_ids

    # ------------------------------------------------------------------ embeddings
    def require_kind(self, kind: str) -> None:
        """``wrong_model_kind`` unless this is a ``kind`` ("chat" or "embedding") model."""
        if self.kind != kind:
            does = {"chat": "generates text", "embedding": "makes text embeddings"}
            raise MnnEngineError("wrong_model_kind", f"{self.model_dir.name} {does[self.kind]}; this needs a model "
                                 f"that {does[kind]}", param="model")

    def embed(self, inputs: str | Sequence[Any], *, normalize: bool = True, truncate: bool = False,
              claim: ModelClaim | None = None) -> EmbeddingResult:
        """Embed a text, a list of token ids, or a list of either (a batch):
        one vector per input, in order, of unit length unless ``normalize``
        is False. Texts are wrapped as the model's template says (e.g. an
        end-of-text token after the text); token ids are used as given.
        Needs an embedding model (``wrong_model_kind`` otherwise); an input
        longer than the context is ``context_length_exceeded``, or with
        ``truncate`` cut to fit (its end goes; a template's suffix stays). Runs one
        input at a time under the generation lock; ``cancel()`` stops it
        between inputs (``generation_cancelled``). With ``claim`` (taken
        earlier with ``claim()``), that claim is used and given back."""
        try:
            self.require_kind("embedding")
            items = embedding_inputs(inputs)
        except BaseException:
            if claim is not None:
                claim.release()
            raise
        vectors: list[list[float]] = []
        tokens = 0
        with self._exclusive(claim) as core:
            for i, item in enumerate(items):
                try:
                    ids = self._embedding_ids(core, item, truncate)
                except PromptCancelled:
                    ids = []
                if core.cancel_requested():
                    raise MnnEngineError("generation_cancelled", f"cancelled after {i} of {len(items)} inputs")
                raw = core.embed(ids)
                if not raw:
                    raise MnnEngineError("generation_failed", "MNN returned no float32 embedding")
                vectors.append(vector_from(raw, normalize))
                tokens += len(ids)
        return EmbeddingResult(vectors, tokens)

    def _embedding_ids(self, core: _mnn.LlmCore, item: EmbeddingInput, truncate: bool) -> list[int]:
        param = "input"
        limit = self._context_length
        if isinstance(item, list):
            ids = self.checked_ids(item, param, _FOREIGN_IDS_HINT)
            if truncate:
                ids = ids[:limit]
        else:
            if not is_valid_unicode(item):
                raise invalid(param, "must be valid Unicode (no lone surrogates)")
            prefix, suffix = self._embedding_wrap or ("", "")
            text = prefix + item + suffix if self._embedding_wrap else \
                self.apply_chat_template([{"role": "user", "content": item}])
            cancelled = core.cancel_requested
            found = self._tokens_within(core, text, limit, cancelled)
            if found is None and truncate:
                tail = self._tokens_within(core, suffix, limit, cancelled) or []
                head = self._tokens_within(core, prefix + item, sys.maxsize, cancelled) or []
                found = head[:max(limit - len(tail), 1)] + tail
            if found is None:
                raise MnnEngineError("context_length_exceeded",
                                     f"an input has more than {limit} tokens, the model's context", param=param)
            ids = found
        if not ids:  # MNN would run a forward over nothing
            raise MnnEngineError("empty_prompt", "an input has no tokens", param=param)
        if len(ids) > limit:
            raise MnnEngineError("context_length_exceeded",
                                 f"an input has {len(ids)} tokens; the context holds {self._context_length}",
                                 param=param)
        return ids

    # ------------------------------------------------------------------ baseline
    def mnn_response(self, token_ids: Sequence[int], max_new_tokens: int) -> dict[str, Any]:
        """Run MNN's own loop (``Llm::response``) over token ids, with the
        sampler MNN built at load; returns its timings. For benchmarks."""
        self.require_kind("chat")
        ids = self.checked_ids(token_ids, "token_ids")
        with self._exclusive() as core:
            return _mnn.mnn_response(core, ids, int(max_new_tokens))

    def __repr__(self) -> str:
        state = "loaded" if self.is_loaded else "not loaded"
        return f"<mnn_engine.Llm {str(self.model_dir)!r} {state}>"


def _never() -> bool:
    return False


def _embedding_rows(model: ModelDir) -> int:
    """The vocabulary size of an embedding model: the rows of its bf16
    embedding table (such models have no logits to count); 0 when unknown."""
    table = model.files.get("embedding_file")
    hidden = model.config.get("hidden_size")
    if table is None or not isinstance(hidden, int) or hidden <= 0:
        return 0
    return table.stat().st_size // (2 * hidden)


def _sampler_defaults(config: Mapping[str, Any]) -> dict[str, Any]:
    """The model's configured sampler, in GenerationConfig terms."""
    out: dict[str, Any] = {}
    for key in _SAMPLER_DEFAULT_KEYS:
        value = config.get(key)
        if is_number(value) and math.isfinite(value):
            out[key] = value
    if config.get("sampler_type") == "greedy":
        out["temperature"] = 0.0
    return out
