# LlmCore: one MNN Llm instance and the calls the Python layer makes on it.
# Included by src/_mnn.pyx: one extension, a file per concept.

cdef class LlmCore:
    """One MNN `Llm` instance. Created from a config.json path; `load()` reads
    the weights. Thread-safety: the Python layer serialises generations;
    `cancel()` may be called from any thread at any time."""

    cdef Llm* _llm
    cdef cbool _loaded
    # LoRA: an adapter's core keeps its base's alive (MNN's adapter module runs on the base's); a base
    # counts its adapters, and a close() asked while some live frees it with the last of them
    cdef LlmCore _base
    cdef int _adapters
    cdef cbool _closing
    cdef atomic[int] _cancel
    # text of tokens MNN's tokenizer decodes to nothing (e.g. <think>)
    cdef unordered_map[int, string] _token_text
    cdef int _fail_after  # test hook: fail the next generation after N tokens
    # the token ids in MNN's KV cache, in order (prompt cache); empty when unknown
    cdef vector[int] _held
    # speculative decoding: cost of a decode forward over L tokens relative to
    # one token, for L = 1..len-1 (index 0 unused); empty: not prepared
    cdef vector[double] _verify_cost
    # decode-time forward lengths whose module MNN has built since load (flag by length)
    cdef vector[char] _built_lengths
    cdef readonly str config_path
    #: a text-embedding model (MNN's Embedding): embed() instead of generate()
    cdef readonly cbool embedding
    #: MNN's rows do not depend on the batch (checked at load): the prompt
    #: cache keeps any shared prefix, generated tokens included
    cdef public cbool exact_reuse
    #: what captures MNN's prints around a forward that builds a module mid-generation (the runtime's
    #: ``captured_native_output``, whose lock orders every redirect of the process); None: no capture
    cdef public object native_capture

    def __cinit__(self, str config_path, bint embedding=False, bint empty=False):
        self.config_path = config_path
        self.embedding = embedding
        cdef string path = config_path.encode("utf-8")
        if not empty:  # (empty: an adapter's, whose Llm create_adapter makes)
            with nogil:
                self._llm = create_embedding_model(path) if embedding else Llm.createLLM(path)
        self._loaded = False
        self._cancel.store(0)
        self._fail_after = -1

    def __dealloc__(self):
        self._destroy()

    cdef void _destroy(self) noexcept:
        cdef Llm* llm = self._llm
        cdef LlmCore base = self._base
        self._loaded = False
        if llm == NULL:
            return
        if self._adapters > 0:  # its adapters run on its module: freed with the last of them
            self._closing = True
            return
        self._llm = NULL
        with nogil:
            Llm.destroy(llm)
        if base is not None:
            self._base = None
            base._adapters -= 1
            if base._closing and base._adapters == 0:
                base._destroy()

    cdef Llm* _require(self, cbool loaded=True) except NULL:
        if self._llm == NULL or self._closing:
            raise RuntimeError("the model is closed")
        if loaded and not self._loaded:
            raise RuntimeError("the model is not loaded")
        return self._llm

    @property
    def is_open(self) -> bool:
        return self._llm != NULL

    @property
    def is_loaded(self) -> bool:
        return self._llm != NULL and self._loaded

    def set_config(self, str config_json) -> bool:
        """Merge a JSON object into MNN's config (before load for most keys)."""
        cdef Llm* llm = self._require(False)
        cdef string s = config_json.encode("utf-8")
        cdef cbool ok
        with nogil:
            ok = llm.set_config(s)
        return ok

    def dump_config(self) -> str:
        cdef Llm* llm = self._require(False)
        cdef string s
        with nogil:
            s = llm.dump_config()
        return s.decode("utf-8", "replace")

    def load(self) -> bool:
        cdef Llm* llm = self._require(False)
        cdef cbool ok
        with nogil:
            ok = llm.load()
        self._loaded = ok
        self._built_lengths.clear()
        return ok

    def close(self) -> None:
        """Free the model; idempotent (a base with adapters alive is freed with the last of them)."""
        self._destroy()

    def create_adapter(self, str lora_path):
        """A core running the LoRA graph ``lora_path`` (relative to this model's
        directory: MNN joins it to it) over this core's weights, loaded (MNN's
        ``Llm::create_lora``); None when MNN refuses it."""
        cdef Llm* llm = self._require()
        cdef string path = lora_path.encode("utf-8")
        cdef Llm* adapted = NULL
        cdef LlmCore core
        with nogil:
            adapted = llm.create_lora(path)
        if adapted == NULL:
            return None
        core = LlmCore.__new__(LlmCore, self.config_path, False, True)
        core._llm = adapted
        core._loaded = True
        core._base = self
        self._adapters += 1
        return core

    def tokenize(self, str text) -> list:
        cdef Llm* llm = self._require()
        cdef string s = text.encode("utf-8", "surrogatepass")
        cdef vector[int] ids
        with nogil:
            ids = llm.tokenizer_encode(s)
        return list(ids)

    def set_token_text(self, int token, bytes text) -> None:
        """Text to emit for a token that MNN's tokenizer decodes to nothing."""
        self._token_text[token] = text

    def token_bytes(self, int token) -> bytes:
        cdef Llm* llm = self._require()
        cdef string s
        with nogil:
            s = decode_token(llm, &self._token_text, token)
        return PyBytes_FromStringAndSize(s.data(), s.size())

    def max_token_bytes(self, int vocab) -> int:
        """Length in bytes of the longest token among ids 0..vocab-1."""
        cdef Llm* llm = self._require()
        cdef size_t longest = 0
        cdef size_t length
        cdef int token
        with nogil:
            for token in range(vocab):
                length = decode_token(llm, &self._token_text, token).size()
                if length > longest:
                    longest = length
        return longest

    def detokenize(self, ids) -> bytes:
        cdef Llm* llm = self._require()
        cdef vector[int] v = ids
        cdef string out
        cdef size_t i
        with nogil:
            for i in range(v.size()):
                out.append(decode_token(llm, &self._token_text, v[i]))
        return PyBytes_FromStringAndSize(out.data(), out.size())

    def is_stop(self, int token) -> bool:
        return self._require().is_stop(token)

    def apply_chat_template(self, messages) -> str:
        """Render (role, content) pairs with the model's template, adding the
        assistant generation prompt."""
        cdef Llm* llm = self._require()
        cdef vector[pair[string, string]] v
        for role, content in messages:
            v.push_back(pair[string, string](role.encode("utf-8"), content.encode("utf-8")))
        cdef string out
        with nogil:
            out = llm.apply_chat_template(v)
        return out.decode("utf-8", "replace")

    def context_stats(self) -> dict:
        cdef LlmContext* c = llm_context(self._require())
        return {"prompt_len": c.prompt_len, "gen_seq_len": c.gen_seq_len,
                "all_seq_len": c.all_seq_len, "load_us": c.load_us,
                "prefill_us": c.prefill_us, "decode_us": c.decode_us, "sample_us": c.sample_us}

    def cancel(self) -> None:
        """Ask the running generation to stop before its next token."""
        self._cancel.store(1)

    def clear_cancel(self) -> None:
        self._cancel.store(0)

    def cancel_requested(self) -> bool:
        return self._cancel.load() != 0

    def vocab_size(self) -> int:
        """Size of the logits vector, found by one short forward (also a warm-up)."""
        cdef Llm* llm = self._require()
        cdef vector[int] ids = self.tokenize("Hi")
        cdef VARP logits
        cdef int n = 0
        self._held.clear()
        with nogil:
            llm.reset()
            llm.generate_init(NULL, NULL)
            logits = llm.forward(ids, True)
            read_logits(logits, &n)
            varp_reset(logits)
            llm.reset()
        return n

    def embed(self, token_ids) -> bytes:
        """The sentence embedding of one input's token ids, as float32 bytes
        (one forward over all of them, from an empty KV cache); b"" when MNN
        returns nothing."""
        cdef Llm* llm = self._require()
        if not self.embedding:
            raise RuntimeError("not an embedding model")
        cdef vector[int] ids = token_ids
        cdef vector[float] out
        cdef cbool ok
        with nogil:
            ok = embed_ids(llm, ids, &out)
        if not ok:
            return b""
        return PyBytes_FromStringAndSize(<const char*>out.data(), out.size() * sizeof(float))

    @property
    def held_tokens(self) -> int:
        """How many token ids the KV cache holds for the prompt cache."""
        return self._held.size()

    def held_ids(self) -> list:
        """The token ids the KV cache holds for the prompt cache, in order."""
        return list(self._held)

    def forget(self) -> None:
        """Drop the prompt cache: the next generation prefills everything."""
        self._held.clear()

    def drop_media(self) -> None:
        """Drop the image and audio embeddings MNN's tokenizer made for a
        prompt that was never generated from. ``Omni::tokenizer_encode``
        appends them to a list that only ``Omni::embedding`` of a forward
        empties (and it takes them by position): left there, the next
        image prompt got the stale picture. An embedding of two text ids
        empties it (no forward runs)."""
        cdef Llm* llm = self._require()
        cdef vector[int] ids = vector[int](2, 0)
        cdef VARP dropped
        with nogil:
            dropped = llm.embedding(ids)
            varp_reset(dropped)

    def generate(self, prompt_ids, GenerationSettings settings not None, callback=None,
                 constraint=None) -> GenerationOutcome:
        """Run one generation over prompt token ids. See mnn_engine.Llm.generate.
        With ``settings.reuse``, the longest prefix of the prompt that the KV
        cache already holds is kept and only the rest is prefilled. With
        ``settings.draft_tokens`` > 0 (at most ``max_draft``), decoding is
        speculative: prompt-lookup drafts are verified in one forward and the
        sampler's own draws decide what is kept, so the output is the
        sampler's, token by token."""
        cdef Llm* llm = self._require()
        cdef vector[int] prompt = prompt_ids
        cdef size_t keep = 0
        if settings.reuse:
            keep = kept_prefix(common_prefix(self._held, prompt), prompt.size(), self.exact_reuse)
            if keep > 0 and llm.getCurrentHistory() < self._held.size():
                keep = 0  # not what MNN holds: never trust it
        self._held.clear()
        cdef _Sampler sampler = _Sampler()
        sampler.p = settings.sampler
        sampler.bias = settings.bias
        sampler.rng = settings.seed
        sampler.masked = constraint is not None
        cdef _Loop loop = _Loop()
        loop.llm = llm
        loop.sampler = sampler
        loop.stops = settings.stops
        loop.callback = callback
        loop.has_callback = callback is not None
        loop.max_tokens = settings.max_tokens
        loop.context_length = settings.context_length
        loop.ignore_eos = settings.ignore_eos
        loop.whole_prefill = settings.whole_prefill
        loop.exact_reuse = self.exact_reuse
        loop.cancel_flag = &self._cancel
        loop.token_text = &self._token_text
        loop.fail_after = self._fail_after
        loop.constraint = constraint
        loop.has_constraint = constraint is not None
        loop.spec_max = min(settings.draft_tokens, self.max_draft)
        loop.verify_cost = &self._verify_cost
        loop.verify_serially = settings.verify_serially
        loop.built_lengths = &self._built_lengths
        loop.native_capture = self.native_capture
        self._fail_after = -1
        with nogil:
            loop.run(prompt, keep)
        if loop.finish != F_ERROR:
            # With exact reuse, the prompt and the generated tokens whose KV
            # MNN holds (a next turn that repeats the answer reuses them).
            # Without it, only the prompt: the generated tokens' KV came from
            # single-token forwards, which a fresh prefill would not
            # reproduce bit for bit; they are erased on reuse.
            if self.exact_reuse:  # (a prefill cancelled between chunks has no history: its prompt's chunks)
                self._held = loop.history if loop.history.size() > 0 else prompt
                if self._held.size() > <size_t>llm.getCurrentHistory():
                    self._held.resize(llm.getCurrentHistory())
            else:
                self._held = prompt
        if loop.error is not None:
            raise loop.error
        if loop.callback_error is not None:
            raise loop.callback_error
        return loop.outcome()

    def score(self, prompt_ids, target_ids, int top=0):
        """Log-probability of each target token after the prompt and the
        targets before it (teacher forcing: one forward per target token),
        and at each position the ``top`` most likely tokens as (token,
        log-probability) pairs: ``(logprobs, tops)``. Both empty when
        cancelled; None when MNN returns no logits."""
        cdef Llm* llm = self._require()
        cdef vector[int] prompt = prompt_ids
        cdef vector[int] targets = target_ids
        cdef vector[double] out
        cdef vector[vector[pair[float, int]]] tops
        cdef cbool failed = False
        self._held.clear()
        with nogil:
            failed = not score_targets(llm, prompt, targets, &self._cancel, &out, top, &tops)
        if failed:
            return None
        return list(out), [[(p.second, p.first) for p in position] for position in tops]

    def set_verify_costs(self, costs) -> None:
        """Costs of verifying forwards over 1, 2, ... tokens relative to one
        token (``costs[0]`` is 1.0): what speculative decoding weighs drafts
        against; its longest draft is ``len(costs) - 1``. Empty: no drafting."""
        self._verify_cost.clear()
        if costs:
            self._verify_cost.push_back(0.0)
            for c in costs:
                self._verify_cost.push_back(c)

    @property
    def max_draft(self) -> int:
        """Longest draft the prepared verification costs allow (0: not prepared)."""
        return max(<int>self._verify_cost.size() - 2, 0)
