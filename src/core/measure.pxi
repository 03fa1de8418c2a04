# Measurements over a loaded core, apart from the generation path: the load-time
# checks (forward_rows: are a batch's rows a lone row's; forward_costs: what a
# verification of k tokens costs), the benchmark baseline (MNN's own loop) and
# the tests' failure hook. Module functions taking the core, so LlmCore holds
# the production calls only. Included by src/_mnn.pyx after core/llm_core.pxi.


def forward_costs(LlmCore core not None, prompt_ids, lengths, int repeats=3) -> list:
    """Milliseconds of a decode-time forward over L tokens (all logits
    returned for L > 1) after the prompt, for each L in ``lengths``: the
    fastest of ``repeats`` (noise only adds time; the first forward of a
    new length also builds MNN's module for it). The repeats go round
    the lengths, so a burst of load elsewhere inflates one round, not
    every repeat of one length. What a speculative verification costs
    against a single-token step."""
    cdef Llm* llm = core._require()
    cdef vector[int] prompt = prompt_ids
    cdef vector[int] lens = lengths
    cdef vector[int] ids
    cdef VARP logits_var
    cdef size_t base = 0
    cdef int64_t took = 0
    cdef int i, r
    cdef int vocab = 0
    cdef int rows = 0
    if prompt.size() == 0:
        raise ValueError("forward_costs needs a prompt")
    core._held.clear()
    with nogil:
        logits_var = prefill(llm, prompt, 0, &core._cancel)
        base = llm.getCurrentHistory()
    out = [INFINITY] * <int>lens.size()
    for r in range(repeats):
        for i in range(<int>lens.size()):
            with nogil:
                ids.assign(lens[i], prompt[prompt.size() - 1])
                set_all_logits(llm, lens[i] > 1)
                took = monotonic_ns()
                varp_reset(logits_var)
                logits_var = llm.forward(ids, False)
                read_all_logits(logits_var, &vocab, &rows)
                took = monotonic_ns() - took
                set_all_logits(llm, False)
                llm.eraseHistory(base, 0)
                mark_built(&core._built_lengths, lens[i])
            if rows != lens[i]:
                with nogil:
                    varp_reset(logits_var)
                    llm.reset()
                raise RuntimeError(f"MNN returned {rows} rows of logits for {lens[i]} tokens")
            out[i] = min(out[i], ns_to_ms(took))
    with nogil:
        varp_reset(logits_var)
        llm.reset()
    return out

def forward_rows(LlmCore core not None, prompt_ids, batches) -> bytes:
    """The float32 logits of every token of ``batches`` (lists of ids), row
    after row: the KV cache is reset, ``prompt_ids`` prefilled as the
    engine prefills, then each batch is one forward after the last, all
    logits returned. The same tokens in other batch sizes must give the same
    bytes where MNN's arithmetic is batch-independent (what speculative
    verification and the prompt cache rely on)."""
    cdef Llm* llm = core._require()
    cdef vector[int] prompt = prompt_ids
    cdef vector[int] ids
    cdef VARP logits_var
    cdef const float* data = NULL
    cdef int vocab = 0
    cdef int rows = 0
    cdef cbool all_on = True
    out = []
    core._held.clear()
    with nogil:
        llm.reset()
        if prompt.size() > 0:
            logits_var = prefill(llm, prompt, 0, &core._cancel)
    try:
        for batch in batches:
            ids = batch
            if ids.size() == 0:
                raise ValueError("forward_rows needs non-empty batches")
            with nogil:
                all_on = set_all_logits(llm, True)
                varp_reset(logits_var)
                logits_var = llm.forward(ids, False)
                data = read_all_logits(logits_var, &vocab, &rows)
            if not all_on or data == NULL or rows != <int>ids.size():
                raise RuntimeError(f"MNN returned {rows} rows of logits for {ids.size()} tokens")
            out.append(PyBytes_FromStringAndSize(<const char*>data, <Py_ssize_t>rows * vocab * sizeof(float)))
    finally:
        with nogil:
            set_all_logits(llm, False)
            varp_reset(logits_var)
            llm.reset()
    return b"".join(out)


def mnn_response(LlmCore core not None, prompt_ids, int max_new_tokens) -> dict:
    """MNN's own generation loop (`Llm::response`) over the same ids: the
    benchmark baseline. Uses the sampler MNN built at load time."""
    cdef Llm* llm = core._require()
    cdef vector[int] ids = prompt_ids
    cdef TimingStreamBuf buf
    cdef int64_t start, end
    core._held.clear()
    with nogil:
        llm.reset()
        start = monotonic_ns()
        run_mnn_response(llm, ids, &buf, max_new_tokens)
        end = monotonic_ns()
    cdef LlmContext* c = llm_context(llm)
    return {"start_ns": start, "end_ns": end, "first_token_ns": buf.first_ns,
            "last_token_ns": buf.last_ns, "tokens": buf.flushes,
            "prompt_len": c.prompt_len, "gen_seq_len": c.gen_seq_len,
            "prefill_us": c.prefill_us, "decode_us": c.decode_us, "sample_us": c.sample_us}


def inject_failure(LlmCore core not None, int after_tokens) -> None:
    """Test hook: make the next generation fail after this many tokens,
    the way an engine failure inside the loop does."""
    core._fail_after = after_tokens
