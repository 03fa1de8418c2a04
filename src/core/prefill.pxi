# Prefill and the prompt cache: chunk-aligned prefills, kept prefixes, scoring.
# Included by src/_mnn.pyx: one extension, a file per concept.

# Prompts are prefilled in chunks whose boundaries sit at multiples of the
# chunk size. Where MNN's arithmetic depends on the batch shape (an unpatched
# MNN: LlmCore.exact_reuse off), a prefill over a kept KV cache is
# bit-identical to a fresh one only if it computes the same chunks, so the
# prompt cache keeps whole chunks only, and chunks stay small (64) so that
# little is re-prefilled. With exact_reuse (our MNN patch, checked at load:
# Llm.batch_exact) any shared prefix is kept and chunks are as large as MNN
# runs fastest (256: tools/bench/prefill_chunk.py). 0: one batch.
cdef size_t PREFILL_CHUNK = 64
cdef size_t EXACT_PREFILL_CHUNK = 256


def set_prefill_chunk(size_t tokens) -> None:
    """Chunk size of prompt prefills, with and without exact reuse (0: the
    whole prompt in one batch). For measurements; without exact reuse the
    prompt cache is exact only with a fixed, non-zero size."""
    global PREFILL_CHUNK, EXACT_PREFILL_CHUNK
    PREFILL_CHUNK = tokens
    EXACT_PREFILL_CHUNK = tokens


def prefill_chunk(exact: bool = False) -> int:
    """Chunk size of prompt prefills without (default) or with exact reuse."""
    return EXACT_PREFILL_CHUNK if exact else PREFILL_CHUNK


cdef size_t kept_prefix(size_t common, size_t prompt_size, cbool exact) noexcept nogil:
    """How much of a cached prefix to keep: all of it where MNN's rows do not
    depend on the batch (``exact``), else whole chunks; and at least one token
    of the prompt left to prefill (its logits start the answer)."""
    if prompt_size == 0:
        return 0
    if common > prompt_size - 1:
        common = prompt_size - 1
    if exact:
        return common
    if PREFILL_CHUNK == 0:  # one batch: nothing lines up, keep what matches but two tokens
        return common - 1 if common + MIN_PREFILL > prompt_size and common > 0 else common
    return (common // PREFILL_CHUNK) * PREFILL_CHUNK


cdef VARP prefill(Llm* llm, const vector[int]& prompt, size_t keep, atomic[int]* cancel,
                  cbool whole=False, cbool exact=False) noexcept nogil:
    """Prefill prompt[keep:] over a KV cache holding prompt[:keep] (keep 0:
    from scratch), chunk by chunk (``whole``: in one forward; ``exact``: in
    the exact-reuse chunk size); the logits of the last token, or an empty
    VARP when cancelled between chunks.

    A prompt with images or audio goes whole: MNN's ``Omni::embedding``
    splices the encoder's embeddings in for the pad tokens of the one forward
    it is given and then drops them, and its multimodal RoPE positions are
    computed for the whole prompt (a chunked prefill read a freed vector and
    crashed the process)."""
    cdef VARP logits_var
    cdef vector[int] chunk
    cdef size_t start = keep
    cdef size_t end
    cdef size_t size = EXACT_PREFILL_CHUNK if exact else PREFILL_CHUNK
    if keep > 0:
        if llm.getCurrentHistory() > keep:
            llm.eraseHistory(keep, 0)
    else:
        llm.reset()
    while start < prompt.size():
        end = prompt.size()
        if not whole and size > 0 and end - start > size - start % size:
            end = start - start % size + size
        chunk.assign(prompt.begin() + start, prompt.begin() + end)
        varp_reset(logits_var)
        llm.generate_init(NULL, NULL)  # each chunk is a prefill (a forward counts as a generated step)
        logits_var = llm.forward(chunk, True)
        start = end
        if start < prompt.size() and cancel[0].load() != 0:
            varp_reset(logits_var)
            break
    return logits_var


cdef cbool score_targets(Llm* llm, const vector[int]& prompt, const vector[int]& targets,
                         atomic[int]* cancel, vector[double]* out, int top=0,
                         vector[vector[pair[float, int]]]* tops=NULL) noexcept nogil:
    """Fill ``out`` with log p(target i | prompt, targets before i), and
    ``tops`` (when given) with the ``top`` most likely tokens at each of those
    positions. False when MNN returns no logits; stops early (``out`` and
    ``tops`` cleared) when cancelled."""
    cdef VARP logits_var
    cdef const float* logits
    cdef int vocab = 0
    cdef int i, token
    cdef double lse
    cdef vector[int] one = vector[int](1)
    cdef vector[pair[float, int]] scratch
    logits_var = prefill(llm, prompt, 0, cancel)
    if cancel[0].load() != 0:
        varp_reset(logits_var)
        llm.reset()
        out.clear()
        return True
    for i in range(<int>targets.size()):
        if cancel[0].load() != 0:
            out.clear()
            if tops != NULL:
                tops.clear()
            break
        logits = read_logits(logits_var, &vocab)
        token = targets[i]
        if logits == NULL or not 0 <= token < vocab:
            varp_reset(logits_var)
            llm.reset()
            return False
        lse = log_sum_exp(logits, vocab)
        # in float32, as the sampler records a generated token's: the same token at the same position has
        # the same value either way, and equals its entry among the most likely when it is the top one
        out.push_back(<float>(logits[token] - lse))
        if tops != NULL:
            tops.push_back(vector[pair[float, int]]())
            most_likely(logits, vocab, lse, top, &scratch, &tops.back())
        if i + 1 < <int>targets.size():
            varp_reset(logits_var)
            one[0] = token
            logits_var = llm.forward(one, False)
    varp_reset(logits_var)
    llm.reset()
    return True


cdef string decode_token(Llm* llm, unordered_map[int, string]* overrides, int token) noexcept nogil:
    cdef string piece = llm.tokenizer_decode(token)
    cdef unordered_map[int, string].iterator found
    if piece.empty() and not overrides.empty():
        found = overrides.find(token)
        if found != overrides.end():
            return deref(found).second
    return piece


cdef size_t MIN_PREFILL = 2


cdef size_t common_prefix(const vector[int]& a, const vector[int]& b) noexcept nogil:
    cdef size_t n = min(a.size(), b.size())
    cdef size_t i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


cdef inline double ns_to_ms(int64_t ns) noexcept nogil:
    return ns / 1e6
