# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
# distutils: language = c++
"""Native core of mnn_engine: MNN's Llm, our generation loop and our sampler.

Everything per token (forward, sampling, stop checks, detokenising, UTF-8
assembly) runs with the GIL released; the per-token callback takes the GIL
only for itself. The Python layer (mnn_engine.llm) validates arguments and
turns the dictionaries returned here into typed results.
"""

from cpython.bytes cimport PyBytes_FromStringAndSize
from cython.operator cimport dereference as deref
from libc.math cimport INFINITY, exp, log
from libc.stdint cimport int64_t, uint32_t, uint64_t
from libc.string cimport memcmp
from libcpp cimport bool as cbool
from libcpp.atomic cimport atomic
from libcpp.string cimport string
from libcpp.unordered_map cimport unordered_map
from libcpp.utility cimport pair
from libcpp.vector cimport vector



cdef extern from "<algorithm>" namespace "std" nogil:
    void nth_element[Iter](Iter first, Iter nth, Iter last)
    void partial_sort[Iter](Iter first, Iter middle, Iter last)


FINISH_STOP = "stop"
FINISH_LENGTH = "length"
FINISH_CANCELLED = "cancelled"
FINISH_ERROR = "error"

cdef enum Finish:
    F_NONE = 0
    F_STOP = 1
    F_LENGTH = 2
    F_CANCELLED = 3
    F_ERROR = 4

_FINISH_NAMES = {F_STOP: FINISH_STOP, F_LENGTH: FINISH_LENGTH,
                 F_CANCELLED: FINISH_CANCELLED, F_ERROR: FINISH_ERROR}


def build_info() -> dict:
    """How this extension was built (provenance), as compiled into it."""
    return {
        "mnn_engine_version": MNN_ENGINE_BUILD_VERSION.decode(),
        "mode": MNN_ENGINE_BUILD_MODE.decode(),
        "mnn_version": MNN_ENGINE_BUILD_MNN_VERSION.decode(),
        "mnn_commit": MNN_ENGINE_BUILD_MNN_COMMIT.decode(),
        "mnn_source": MNN_ENGINE_BUILD_MNN_SOURCE.decode(),
        "backends_compiled": [b for b in MNN_ENGINE_BUILD_BACKENDS.decode().split(",") if b],
        "compiler": MNN_ENGINE_BUILD_COMPILER.decode(),
        "cpu_family": MNN_ENGINE_BUILD_CPU_FAMILY.decode(),
        "system": MNN_ENGINE_BUILD_SYSTEM.decode(),
        "buildtype": MNN_ENGINE_BUILD_BUILDTYPE.decode(),
        "flags": MNN_ENGINE_BUILD_FLAGS.decode(),
    }


# ---------------------------------------------------------------- random numbers
cdef inline uint64_t splitmix64(uint64_t* state) noexcept nogil:
    state[0] += <uint64_t>0x9E3779B97F4A7C15
    cdef uint64_t z = state[0]
    z = (z ^ (z >> 30)) * <uint64_t>0xBF58476D1CE4E5B9
    z = (z ^ (z >> 27)) * <uint64_t>0x94D049BB133111EB
    return z ^ (z >> 31)


cdef inline double uniform01(uint64_t* state) noexcept nogil:
    # 53 random bits -> [0, 1); identical on every platform for a given seed
    return (splitmix64(state) >> 11) * (1.0 / 9007199254740992.0)


# ---------------------------------------------------------------- UTF-8 and stop strings
cdef size_t utf8_complete_prefix(const string& s) noexcept nogil:
    """Length of the longest prefix of s that does not end inside a UTF-8
    sequence which later bytes could still complete. Invalid bytes count as
    complete (they are emitted and become U+FFFD)."""
    cdef size_t n = s.size()
    cdef size_t i = n
    cdef size_t back = 0
    cdef unsigned char c
    cdef size_t need
    while i > 0 and back < 4:
        i -= 1
        back += 1
        c = <unsigned char>s[i]
        if (c & 0xC0) == 0x80:
            continue
        if c < 0xC0 or c >= 0xF8:
            return n
        need = 2 if c < 0xE0 else (3 if c < 0xF0 else 4)
        return i if n - i < need else n
    return n


cdef size_t stop_prefix_suffix(const string& held, const vector[string]& stops) noexcept nogil:
    """Length of the longest suffix of held that is a proper prefix of a stop string."""
    cdef size_t best = 0
    cdef size_t k, length, limit
    for k in range(stops.size()):
        limit = stops[k].size() - 1
        if limit > held.size():
            limit = held.size()
        length = limit
        while length > best:
            if memcmp(held.data() + held.size() - length, stops[k].data(), length) == 0:
                best = length
                break
            length -= 1
    return best


cdef size_t find_stop(const string& held, const vector[string]& stops) noexcept nogil:
    """Earliest position of any stop string in held, or held.size() + 1."""
    cdef size_t best = held.size() + 1
    cdef size_t pos
    cdef size_t k
    for k in range(stops.size()):
        pos = held.find(stops[k])
        if pos != <size_t>-1 and pos < best:
            best = pos
    return best


# ---------------------------------------------------------------- drafting
# Prompt lookup: the tokens that followed the latest earlier occurrence of the
# text's last NGRAM_MAX..NGRAM_MIN tokens are the draft (3..1 measured best
# against 3..2, 4..1 and 2..1 with tools/bench/speculative.py's tasks).
cdef int NGRAM_MAX = 3
cdef int NGRAM_MIN = 1
# Acceptance prior (successes, trials) and how fast old verifications fade.
cdef double ACCEPT_PRIOR_S = 1.2
cdef double ACCEPT_PRIOR_T = 2.0
cdef double ACCEPT_DECAY = 0.9
# A verification must beat a plain step by this much in expected tokens per cost.
cdef double GAIN_MARGIN = 1.02
# After drafting stopped paying: plain steps with a draft at hand before a
# one-token probe (doubles after each failed probe, up to PROBE_WAIT_MAX).
cdef int PROBE_WAIT = 16
cdef int PROBE_WAIT_MAX = 256


cdef size_t ngram_draft(const vector[int]& hist, int most, vector[int]* out) noexcept nogil:
    """Fill ``out`` with up to ``most`` tokens that followed the latest earlier
    occurrence of hist's longest matching suffix (NGRAM_MAX down to
    NGRAM_MIN tokens); returns how many."""
    cdef size_t size = hist.size()
    cdef size_t n, start, j, end
    out.clear()
    if most <= 0:
        return 0
    n = NGRAM_MAX
    while n >= <size_t>NGRAM_MIN:
        if n < size:
            start = size - n
            while start > 0:
                start -= 1
                j = 0
                while j < n and hist[start + j] == hist[size - n + j]:
                    j += 1
                if j == n:
                    end = start + n + <size_t>most
                    if end > size:
                        end = size
                    out.assign(hist.begin() + start + n, hist.begin() + end)
                    return out.size()
        n -= 1
    return 0


# ---------------------------------------------------------------- sampler
cdef struct SamplerParams:
    double temperature
    int top_k
    double top_p
    double min_p
    double repetition_penalty
    double presence_penalty
    double frequency_penalty
    int top_logprobs            # -1: no logprobs


cdef double log_sum_exp(const float* w, int n) noexcept nogil:
    """log(sum(exp(w))), computed stably around the maximum."""
    cdef float m = -INFINITY
    cdef double total = 0.0
    cdef int i
    for i in range(n):
        if w[i] > m:
            m = w[i]
    for i in range(n):
        total += exp(w[i] - m)
    return m + log(total)


def argmax_logits(const float[::1] logits) -> int:
    """The sampler's greedy choice over a float32 buffer (exposed for tests)."""
    if logits.shape[0] == 0:
        raise ValueError("no logits")
    cdef _Sampler sampler = _Sampler()
    sampler.vocab = <int>logits.shape[0]
    cdef int token
    with nogil:
        token = sampler.argmax(&logits[0])
    return token


cdef class _Sampler:
    """Per-generation sampler state. Not thread-safe; one per generation."""
    cdef SamplerParams p
    cdef uint64_t rng
    cdef vector[pair[int, float]] bias
    cdef vector[float] work
    cdef vector[pair[float, int]] cand
    cdef vector[int] counts          # per token: times generated
    cdef vector[int] generated_list  # distinct generated tokens
    cdef vector[unsigned char] seen  # per token: in prompt or generated
    cdef vector[int] seen_list
    cdef int vocab
    # structured output: bit i of the mask allows token i (filled by the constraint each step)
    cdef vector[uint32_t] mask
    cdef cbool masked
    # logprobs of the last sampled token
    cdef float last_logprob
    cdef vector[pair[float, int]] last_top

    cdef int setup(self, int vocab, const vector[int]& prompt) except -1:
        self.vocab = vocab
        self.work.resize(vocab)
        self.counts.assign(vocab, 0)
        self.seen.assign(vocab, 0)
        self.generated_list.clear()
        self.seen_list.clear()
        if self.masked:
            self.mask.assign((vocab + 31) // 32, 0xFFFFFFFF)
        cdef size_t i
        cdef int t
        if self.p.repetition_penalty != 1.0:
            for i in range(prompt.size()):
                t = prompt[i]
                if 0 <= t < vocab and not self.seen[t]:
                    self.seen[t] = 1
                    self.seen_list.push_back(t)
        return 0

    cdef inline cbool modifies_logits(self) noexcept nogil:
        return (self.bias.size() > 0 or self.p.repetition_penalty != 1.0
                or self.p.presence_penalty != 0.0 or self.p.frequency_penalty != 0.0 or self.masked)

    cdef void accept(self, int token) noexcept nogil:
        if token < 0 or token >= self.vocab:
            return
        if self.counts[token] == 0:
            self.generated_list.push_back(token)
        self.counts[token] += 1
        if self.p.repetition_penalty != 1.0 and not self.seen[token]:
            self.seen[token] = 1
            self.seen_list.push_back(token)

    cdef const float* adjusted(self, const float* logits) noexcept nogil:
        """Logits after penalties and logit_bias (a copy only when needed)."""
        if not self.modifies_logits():
            return logits
        cdef float* w = self.work.data()
        cdef int i, t
        cdef float v
        cdef double rep = self.p.repetition_penalty
        for i in range(self.vocab):
            w[i] = logits[i]
        if rep != 1.0:
            for i in range(<int>self.seen_list.size()):
                t = self.seen_list[i]
                v = w[t]
                w[t] = v / rep if v > 0 else v * rep
        if self.p.presence_penalty != 0.0 or self.p.frequency_penalty != 0.0:
            for i in range(<int>self.generated_list.size()):
                t = self.generated_list[i]
                w[t] -= self.counts[t] * self.p.frequency_penalty + self.p.presence_penalty
        for i in range(<int>self.bias.size()):
            t = self.bias[i].first
            if 0 <= t < self.vocab:
                w[t] += self.bias[i].second
        if self.masked:
            for i in range(self.vocab):
                if not ((self.mask[i >> 5] >> (i & 31)) & 1):
                    w[i] = -INFINITY
        return w

    cdef void record_logprobs(self, const float* w, int token) noexcept nogil:
        cdef int i
        cdef int n = self.vocab
        cdef double lse = log_sum_exp(w, n)
        self.last_logprob = <float>(w[token] - lse)
        self.last_top.clear()
        cdef int k = self.p.top_logprobs
        if k <= 0:
            return
        if k > n:
            k = n
        self.cand.resize(n)
        for i in range(n):
            self.cand[i].first = -w[i]
            self.cand[i].second = i
        partial_sort(self.cand.begin(), self.cand.begin() + k, self.cand.end())
        for i in range(k):
            self.last_top.push_back(pair[float, int](<float>(-self.cand[i].first - lse),
                                                     self.cand[i].second))

    cdef int sample(self, const float* logits) noexcept nogil:
        cdef const float* w = self.adjusted(logits)
        cdef int token = self.choose(w)
        if self.p.top_logprobs >= 0:
            self.record_logprobs(w, token)
        return token

    cdef int argmax(self, const float* w) noexcept nogil:
        """Index of the largest logit, the first one on ties. Eight running
        maxima without a loop-carried branch let the compiler use vector max
        instructions (a plain compare-and-branch loop cannot be vectorised);
        a second pass finds the first index holding the maximum."""
        cdef int n = self.vocab
        cdef int body = n - n % 8
        cdef float lanes[8]
        cdef float m = -INFINITY
        cdef int i, j
        for j in range(8):
            lanes[j] = -INFINITY
        for i in range(0, body, 8):
            for j in range(8):
                lanes[j] = w[i + j] if w[i + j] > lanes[j] else lanes[j]
        for j in range(8):
            if lanes[j] > m:
                m = lanes[j]
        for i in range(body, n):
            if w[i] > m:
                m = w[i]
        for i in range(n):
            if w[i] == m:
                return i
        return 0

    cdef int choose(self, const float* w) noexcept nogil:
        cdef int n = self.vocab
        cdef int i, kept
        cdef double inv_t, total, acc, target, threshold
        cdef float m
        if self.p.temperature <= 0.0 or self.p.top_k == 1:
            return self.argmax(w)
        inv_t = 1.0 / self.p.temperature
        # candidates as (-scaled logit, id): ascending order = most likely first
        self.cand.resize(n)
        for i in range(n):
            self.cand[i].first = -w[i] * inv_t
            self.cand[i].second = i
        kept = n
        if 0 < self.p.top_k < n:
            kept = self.p.top_k
            nth_element(self.cand.begin(), self.cand.begin() + kept - 1, self.cand.end())
        m = INFINITY
        for i in range(kept):
            if self.cand[i].first < m:
                m = self.cand[i].first
        if m == INFINITY:       # everything banned: fall back to greedy
            return self.argmax(w)
        # probabilities relative to the most likely token (which gets 1.0)
        total = 0.0
        for i in range(kept):
            self.cand[i].first = <float>exp(m - self.cand[i].first)
            total += self.cand[i].first
        if self.p.min_p > 0.0:
            threshold = self.p.min_p
            total = 0.0
            for i in range(kept):
                if self.cand[i].first < threshold:
                    self.cand[i].first = 0.0
                total += self.cand[i].first
        if self.p.top_p < 1.0:
            kept = self.nucleus(kept, total)
            total = 0.0
            for i in range(kept):
                total += self.cand[i].first
        target = uniform01(&self.rng) * total
        acc = 0.0
        for i in range(kept):
            acc += self.cand[i].first
            if acc > target and self.cand[i].first > 0.0:
                return self.cand[i].second
        # rounding left target at the very end: take the last non-zero candidate
        i = kept - 1
        while i > 0 and self.cand[i].first <= 0.0:
            i -= 1
        return self.cand[i].second

    cdef int nucleus(self, int kept, double total) noexcept nogil:
        """Sort the smallest most-likely prefix of cand[:kept] whose mass
        reaches top_p; return its length. Grows the sorted window 4x at a time
        so the common case never sorts the whole vocabulary."""
        cdef int window = 64
        cdef int i
        cdef double acc
        cdef double goal = self.p.top_p * total
        # sort by probability descending: negate, sort ascending, negate back
        for i in range(kept):
            self.cand[i].first = -self.cand[i].first
        while True:
            if window > kept:
                window = kept
            partial_sort(self.cand.begin(), self.cand.begin() + window, self.cand.begin() + kept)
            acc = 0.0
            for i in range(window):
                acc -= self.cand[i].first
                if acc >= goal:
                    window = i + 1
                    break
            if acc >= goal or window == kept:
                break
            window *= 4
        for i in range(kept):
            self.cand[i].first = -self.cand[i].first
        return window


# ---------------------------------------------------------------- the model
# Prompts are prefilled in chunks whose boundaries sit at multiples of
# PREFILL_CHUNK positions. A prefill over a kept KV cache then computes
# exactly the chunks a fresh prefill computes (MNN's kernels round
# differently for different batch shapes, so an unaligned split would not be
# bit-identical); the prompt cache keeps whole chunks only. 0: one batch.
cdef size_t PREFILL_CHUNK = 64


def set_prefill_chunk(size_t tokens) -> None:
    """Chunk size of prompt prefills (0: the whole prompt in one batch). For
    measurements; the prompt cache is exact only with a fixed, non-zero size."""
    global PREFILL_CHUNK
    PREFILL_CHUNK = tokens


def prefill_chunk() -> int:
    return PREFILL_CHUNK


cdef size_t kept_prefix(size_t common, size_t prompt_size) noexcept nogil:
    """How much of a cached prefix to keep: whole chunks, and at least one
    token of the prompt left to prefill (its logits start the answer)."""
    if prompt_size == 0:
        return 0
    if common > prompt_size - 1:
        common = prompt_size - 1
    if PREFILL_CHUNK == 0:  # one batch: nothing lines up, keep what matches but two tokens
        return common - 1 if common + MIN_PREFILL > prompt_size and common > 0 else common
    return (common // PREFILL_CHUNK) * PREFILL_CHUNK


cdef VARP prefill(Llm* llm, const vector[int]& prompt, size_t keep, atomic[int]* cancel) noexcept nogil:
    """Prefill prompt[keep:] over a KV cache holding prompt[:keep] (keep 0:
    from scratch), chunk by chunk; the logits of the last token, or an empty
    VARP when cancelled between chunks."""
    cdef VARP logits_var
    cdef vector[int] chunk
    cdef size_t start = keep
    cdef size_t end
    if keep > 0:
        if llm.getCurrentHistory() > keep:
            llm.eraseHistory(keep, 0)
    else:
        llm.reset()
    while start < prompt.size():
        end = prompt.size()
        if PREFILL_CHUNK > 0 and end - start > PREFILL_CHUNK - start % PREFILL_CHUNK:
            end = start - start % PREFILL_CHUNK + PREFILL_CHUNK
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
                         atomic[int]* cancel, vector[double]* out) noexcept nogil:
    """Fill ``out`` with log p(target i | prompt, targets before i). False when
    MNN returns no logits; stops early (``out`` cleared) when cancelled."""
    cdef VARP logits_var
    cdef const float* logits
    cdef int vocab = 0
    cdef int i, token
    cdef vector[int] one = vector[int](1)
    logits_var = prefill(llm, prompt, 0, cancel)
    if cancel[0].load() != 0:
        varp_reset(logits_var)
        llm.reset()
        out.clear()
        return True
    for i in range(<int>targets.size()):
        if cancel[0].load() != 0:
            out.clear()
            break
        logits = read_logits(logits_var, &vocab)
        token = targets[i]
        if logits == NULL or not 0 <= token < vocab:
            varp_reset(logits_var)
            llm.reset()
            return False
        out.push_back(logits[token] - log_sum_exp(logits, vocab))
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


cdef class LlmCore:
    """One MNN `Llm` instance. Created from a config.json path; `load()` reads
    the weights. Thread-safety: the Python layer serialises generations;
    `cancel()` may be called from any thread at any time."""

    cdef Llm* _llm
    cdef cbool _loaded
    cdef atomic[int] _cancel
    # text of tokens MNN's tokenizer decodes to nothing (e.g. <think>)
    cdef unordered_map[int, string] _token_text
    cdef int _fail_after  # test hook: fail the next generation after N tokens
    # the token ids in MNN's KV cache, in order (prompt cache); empty when unknown
    cdef vector[int] _held
    # speculative decoding: cost of a decode forward over L tokens relative to
    # one token, for L = 1..len-1 (index 0 unused); empty: not prepared
    cdef vector[double] _verify_cost
    cdef readonly str config_path
    #: a text-embedding model (MNN's Embedding): embed() instead of generate()
    cdef readonly cbool embedding

    def __cinit__(self, str config_path, bint embedding=False):
        self.config_path = config_path
        self.embedding = embedding
        cdef string path = config_path.encode("utf-8")
        with nogil:
            self._llm = create_embedding_model(path) if embedding else Llm.createLLM(path)
        self._loaded = False
        self._cancel.store(0)
        self._fail_after = -1

    def __dealloc__(self):
        self._destroy()

    cdef void _destroy(self) noexcept:
        cdef Llm* llm = self._llm
        self._llm = NULL
        self._loaded = False
        if llm != NULL:
            with nogil:
                Llm.destroy(llm)

    cdef Llm* _require(self, cbool loaded=True) except NULL:
        if self._llm == NULL:
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
        return ok

    def close(self) -> None:
        """Free the model; idempotent."""
        self._destroy()

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

    def inject_failure(self, int after_tokens) -> None:
        """Test hook: make the next generation fail after this many tokens,
        the way an engine failure inside the loop does."""
        self._fail_after = after_tokens

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

    def forget(self) -> None:
        """Drop the prompt cache: the next generation prefills everything."""
        self._held.clear()

    def generate(self, prompt_ids, dict sampling, stop=(), callback=None,
                 int max_tokens=-1, int context_limit=2048, seed=0,
                 bint ignore_eos=False, bint reuse=True, constraint=None, int draft_tokens=0,
                 bint verify_serially=False) -> dict:
        """Run one generation over prompt token ids. See mnn_engine.llm.Llm.generate.
        With ``reuse``, the longest prefix of the prompt that the KV cache
        already holds is kept and only the rest is prefilled. With
        ``draft_tokens`` > 0 (at most ``max_draft``), decoding is speculative:
        prompt-lookup drafts are verified in one forward and the sampler's own
        draws decide what is kept, so the output is the sampler's, token by
        token."""
        cdef Llm* llm = self._require()
        cdef vector[int] prompt = prompt_ids
        cdef size_t keep = 0
        if reuse:
            keep = kept_prefix(common_prefix(self._held, prompt), prompt.size())
            if keep > 0 and llm.getCurrentHistory() < self._held.size():
                keep = 0  # not what MNN holds: never trust it
        self._held.clear()
        cdef _Sampler sampler = _Sampler()
        sampler.p.temperature = sampling["temperature"]
        sampler.p.top_k = sampling["top_k"]
        sampler.p.top_p = sampling["top_p"]
        sampler.p.min_p = sampling["min_p"]
        sampler.p.repetition_penalty = sampling["repetition_penalty"]
        sampler.p.presence_penalty = sampling["presence_penalty"]
        sampler.p.frequency_penalty = sampling["frequency_penalty"]
        sampler.p.top_logprobs = sampling["top_logprobs"]
        sampler.rng = <uint64_t>(seed & 0xFFFFFFFFFFFFFFFF)
        sampler.masked = constraint is not None
        for token, value in sampling["logit_bias"].items():
            sampler.bias.push_back(pair[int, float](token, value))
        cdef vector[string] stops
        for s in stop:
            stops.push_back(s.encode("utf-8"))
        cdef _Loop loop = _Loop()
        loop.llm = llm
        loop.sampler = sampler
        loop.stops = stops
        loop.callback = callback
        loop.has_callback = callback is not None
        loop.max_tokens = max_tokens
        loop.context_limit = context_limit
        loop.ignore_eos = ignore_eos
        loop.cancel_flag = &self._cancel
        loop.token_text = &self._token_text
        loop.fail_after = self._fail_after
        loop.constraint = constraint
        loop.has_constraint = constraint is not None
        loop.spec_max = min(draft_tokens, self.max_draft)
        loop.verify_cost = &self._verify_cost
        loop.verify_serially = verify_serially
        self._fail_after = -1
        with nogil:
            loop.run(prompt, keep)
        if loop.finish != F_ERROR:
            # Only the prompt: the generated tokens in the KV cache were
            # computed by the decode kernels, and a fresh run would prefill
            # them (as part of the next turn's prompt); reusing them would
            # change the outputs. They are erased on reuse.
            self._held = prompt
        if loop.error is not None:
            raise loop.error
        if loop.callback_error is not None:
            raise loop.callback_error
        return loop.result()

    def score(self, prompt_ids, target_ids) -> list:
        """Log-probability of each target token after the prompt and the
        targets before it (teacher forcing: one forward per target token).
        An empty list when cancelled; None when MNN returns no logits."""
        cdef Llm* llm = self._require()
        cdef vector[int] prompt = prompt_ids
        cdef vector[int] targets = target_ids
        cdef vector[double] out
        cdef cbool failed = False
        self._held.clear()
        with nogil:
            failed = not score_targets(llm, prompt, targets, &self._cancel, &out)
        if failed:
            return None
        return list(out)

    def forward_costs(self, prompt_ids, lengths, int repeats=3) -> list:
        """Milliseconds of a decode-time forward over L tokens (all logits
        returned for L > 1) after the prompt, for each L in ``lengths``: the
        fastest of ``repeats`` (noise only adds time; the first forward of a
        new length also builds MNN's module for it). What a speculative
        verification costs against a single-token step."""
        cdef Llm* llm = self._require()
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
        self._held.clear()
        with nogil:
            logits_var = prefill(llm, prompt, 0, &self._cancel)
            base = llm.getCurrentHistory()
        out = []
        for i in range(<int>lens.size()):
            times = []
            for r in range(repeats):
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
                if rows != lens[i]:
                    with nogil:
                        varp_reset(logits_var)
                        llm.reset()
                    raise RuntimeError(f"MNN returned {rows} rows of logits for {lens[i]} tokens")
                times.append(ns_to_ms(took))
            out.append(min(times))
        with nogil:
            varp_reset(logits_var)
            llm.reset()
        return out

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

    def mnn_response(self, prompt_ids, int max_new_tokens) -> dict:
        """MNN's own generation loop (`Llm::response`) over the same ids: the
        benchmark baseline. Uses the sampler MNN built at load time."""
        cdef Llm* llm = self._require()
        cdef vector[int] ids = prompt_ids
        cdef TimingStreamBuf buf
        cdef int64_t start, end
        self._held.clear()
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


cdef class _Loop:
    """State of one generation: runs without the GIL."""
    cdef Llm* llm
    cdef _Sampler sampler
    cdef vector[string] stops
    cdef object callback
    cdef object callback_error
    cdef cbool has_callback
    cdef cbool callback_failed
    cdef object error
    cdef int max_tokens
    cdef int context_limit
    cdef cbool ignore_eos
    cdef atomic[int]* cancel_flag
    cdef unordered_map[int, string]* token_text
    cdef int fail_after
    # structured output: step(previous token, mask address, mask bytes) before each token
    cdef object constraint
    cdef cbool has_constraint
    # outputs
    cdef vector[int] tokens
    cdef vector[float] logprobs
    cdef vector[vector[pair[float, int]]] top_logprobs
    cdef string text
    cdef string held
    cdef Finish finish
    cdef int prompt_len
    cdef int cached  # prompt tokens the KV cache already held (not prefilled)
    cdef int decode_steps
    cdef int64_t t_start, t_prefill_end, t_first, t_end
    cdef int64_t forward_ns  # inside MNN's decode forwards; the rest of decode_ms is this loop's own work
    cdef string error_message
    # speculative decoding (spec_max 0: plain decoding)
    cdef int spec_max
    cdef vector[double]* verify_cost
    cdef vector[int] history  # prompt and output: where drafts are looked up
    cdef vector[int] drafts
    cdef int drafted, accepted
    cdef double accept_s, accept_t  # faded successes and trials of draft tokens
    cdef int probe_wait, since_probe
    cdef cbool probing
    # test mode: verify drafts with one single-token forward each (the rows
    # plain decoding computes, bit for bit), to prove the loop itself lossless
    cdef cbool verify_serially
    cdef vector[float] serial_rows

    cdef cbool cancelled(self) noexcept nogil:
        return self.cancel_flag[0].load() != 0

    cdef void run(self, const vector[int]& prompt, size_t keep) noexcept nogil:
        self.decode(prompt, keep)
        if self.spec_max > 0:
            set_all_logits(self.llm, False)

    cdef void decode(self, const vector[int]& prompt, size_t keep) noexcept nogil:
        cdef VARP logits_var
        cdef const float* logits
        cdef const float* rows_base = NULL
        cdef int vocab = 0
        cdef int rows = 0
        cdef int row = 0  # the row of the last forward's logits being sampled
        cdef int nrows = 1
        cdef int token, k
        cdef size_t kv_base  # KV cache length before the last forward
        cdef string piece
        cdef LlmContext* ctx
        cdef vector[int] ids
        cdef int64_t forward_start
        self.prompt_len = <int>prompt.size()
        self.forward_ns = 0
        self.finish = F_NONE
        self.t_start = monotonic_ns()
        self.t_first = 0
        self.t_prefill_end = 0
        self.cached = <int>keep
        # the KV cache holds prompt[:keep]: what follows is erased, the rest prefilled
        logits_var = prefill(self.llm, prompt, keep, self.cancel_flag)
        self.t_prefill_end = monotonic_ns()
        if self.cancelled():
            self.finish = F_CANCELLED
            self.t_end = monotonic_ns()
            return
        ctx = llm_context(self.llm)
        kv_base = <size_t>ctx.all_seq_len - 1
        logits = read_logits(logits_var, &vocab)
        if logits == NULL:
            self.fail(b"MNN returned no float32 logits")
            return
        with gil:
            try:
                self.sampler.setup(vocab, prompt)
            except BaseException as exc:
                self.error = exc
                self.finish = F_ERROR
                return
        if self.spec_max > 0:
            if set_all_logits(self.llm, True):
                self.history = prompt
                self.accept_s = ACCEPT_PRIOR_S
                self.accept_t = ACCEPT_PRIOR_T
                self.probe_wait = PROBE_WAIT
            else:
                self.spec_max = 0
        while True:
            if self.cancelled():
                self.finish = F_CANCELLED
                break
            if self.has_constraint and not self.constrain(self.tokens.back() if self.tokens.size() > 0 else -1):
                return
            token = self.sampler.sample(logits)
            if self.t_first == 0:
                self.t_first = monotonic_ns()
            if not self.ignore_eos and self.llm.is_stop(token):
                self.finish = F_STOP
                break
            self.sampler.accept(token)
            self.tokens.push_back(token)
            if self.spec_max > 0:
                self.history.push_back(token)
            if self.sampler.p.top_logprobs >= 0:
                self.logprobs.push_back(self.sampler.last_logprob)
                self.top_logprobs.push_back(self.sampler.last_top)
            piece = decode_token(self.llm, self.token_text, token)
            if self.emit(piece):
                break
            if self.fail_after >= 0 and <int>self.tokens.size() >= self.fail_after:
                self.fail(b"injected failure (test hook)")
                return
            if self.max_tokens >= 0 and <int>self.tokens.size() >= self.max_tokens:
                self.finish = F_LENGTH
                break
            # prompt + output fill the context: kv_base + row + 1 is what plain decoding would hold now
            if <int>(kv_base + row + 2) >= self.context_limit:
                self.finish = F_LENGTH
                break
            if self.cancelled():
                self.finish = F_CANCELLED
                break
            if row + 1 < nrows and token == self.drafts[row]:
                row += 1  # the sampler drew the draft: its logits are already computed
                self.accepted += 1
                logits = rows_base + <size_t>row * vocab
                continue
            if nrows > 1:
                self.learn(row, nrows - 1)
                if row + 1 < nrows:  # drop the rejected drafts from the KV cache
                    self.llm.eraseHistory(kv_base + 1 + row, 0)
            kv_base = <size_t>ctx.all_seq_len
            k = self.draft(<int>kv_base)
            ids.assign(1, token)
            ids.insert(ids.end(), self.drafts.begin(), self.drafts.begin() + k)
            varp_reset(logits_var)
            forward_start = monotonic_ns()
            if self.verify_serially and k > 0:
                rows_base = self.forward_serially(ids, &vocab, &rows)
            else:
                logits_var = self.llm.forward(ids, False)
                rows_base = read_all_logits(logits_var, &vocab, &rows)
            self.forward_ns += monotonic_ns() - forward_start
            self.decode_steps += 1
            if rows_base == NULL:
                self.fail(b"MNN returned no float32 logits")
                return
            if k == 0:
                rows_base += <size_t>(rows - 1) * vocab  # the last row (as read_logits takes it)
            elif rows != k + 1:
                self.fail(b"MNN did not return a row of logits for each token of a verification")
                return
            self.drafted += k
            nrows = k + 1
            row = 0
            logits = rows_base
        if self.finish != F_ERROR and not self.callback_failed:
            self.flush_held()
        self.t_end = monotonic_ns()

    cdef const float* forward_serially(self, const vector[int]& ids, int* vocab, int* rows) noexcept nogil:
        """The logits rows of a verification, one single-token forward per token."""
        cdef vector[int] one = vector[int](1)
        cdef VARP logits_var
        cdef const float* logits
        cdef size_t i
        self.serial_rows.clear()
        rows[0] = 0
        for i in range(ids.size()):
            one[0] = ids[i]
            varp_reset(logits_var)
            logits_var = self.llm.forward(one, False)
            logits = read_logits(logits_var, vocab)
            if logits == NULL:
                return NULL
            self.serial_rows.insert(self.serial_rows.end(), logits, logits + vocab[0])
            rows[0] += 1
        return self.serial_rows.data()

    cdef int draft(self, int kv_len) noexcept nogil:
        """How many draft tokens (in self.drafts) to verify with the next
        forward: the count with the best expected tokens per cost, 0 when no
        draft is worth its cost (then, now and then, a one-token probe)."""
        cdef int most = self.spec_max
        cdef int k, best, found
        cdef double p, expected, power, gain, best_gain
        if most <= 0:
            return 0
        if kv_len + 1 + most > self.context_limit - 1:
            most = self.context_limit - 2 - kv_len
        if self.max_tokens >= 0 and <int>self.tokens.size() + most + 1 > self.max_tokens:
            most = self.max_tokens - <int>self.tokens.size() - 1
        found = <int>ngram_draft(self.history, most, &self.drafts)
        if found <= 0:
            return 0
        p = self.accept_s / self.accept_t
        best = 0
        best_gain = GAIN_MARGIN
        expected = 0.0
        power = 1.0
        for k in range(1, found + 1):
            power *= p
            expected += power
            gain = (1.0 + expected) / self.verify_cost[0][k + 1]
            if gain > best_gain:
                best = k
                best_gain = gain
        self.probing = False
        if best == 0:
            self.since_probe += 1
            if self.since_probe >= self.probe_wait:
                self.since_probe = 0
                self.probing = True
                best = 1
        return best

    cdef void learn(self, int accepted, int drafted) noexcept nogil:
        """Fold one verification's outcome into the acceptance estimate."""
        cdef int trials = accepted + (1 if accepted < drafted else 0)
        self.accept_s = self.accept_s * ACCEPT_DECAY + accepted
        self.accept_t = self.accept_t * ACCEPT_DECAY + trials
        if self.probing:
            if accepted > 0:
                self.probe_wait = PROBE_WAIT
            elif self.probe_wait < PROBE_WAIT_MAX:
                self.probe_wait *= 2

    cdef cbool constrain(self, int previous) noexcept nogil:
        """Tell the constraint the token chosen last (-1 before the first) and
        fill the sampler's mask for the next, in one hold of the GIL. False
        (the generation failed) when it raises."""
        with gil:
            try:
                self.constraint.step(previous, <size_t>self.sampler.mask.data(), self.sampler.mask.size() * 4)
                return True
            except BaseException as exc:
                self.error = exc
                self.finish = F_ERROR
                self.t_end = monotonic_ns()
                return False

    cdef void fail(self, const char* message) noexcept nogil:
        self.finish = F_ERROR
        self.error_message = message
        self.t_end = monotonic_ns()

    cdef cbool emit(self, const string& piece) noexcept nogil:
        """Add a token's bytes; send what is safe to send. True when a stop
        string ended the generation or the callback failed."""
        cdef size_t pos, ready, hold
        self.held.append(piece)
        if self.stops.size() > 0:
            pos = find_stop(self.held, self.stops)
            if pos <= self.held.size():
                self.held.resize(pos)
                self.finish = F_STOP
                self.flush_held()
                return True
        ready = utf8_complete_prefix(self.held)
        if self.stops.size() > 0:
            hold = stop_prefix_suffix(self.held, self.stops)
            if self.held.size() - hold < ready:
                ready = self.held.size() - hold
        if ready == 0:
            return False
        return self.send(ready)

    cdef void flush_held(self) noexcept nogil:
        if self.held.size() > 0:
            self.send(self.held.size())

    cdef cbool send(self, size_t length) noexcept nogil:
        """Move held[:length] to the output and the callback."""
        cdef string out = self.held.substr(0, length)
        self.held.erase(0, length)
        self.text.append(out)
        if not self.has_callback:
            return False
        with gil:
            try:
                self.callback(out.decode("utf-8", "replace"))
            except BaseException as exc:
                self.callback_error = exc
                self.callback_failed = True
                self.finish = F_CANCELLED
                return True
        return False

    def result(self) -> dict:
        cdef int64_t end = self.t_end
        cdef int n = <int>self.tokens.size()
        cdef double decode_ms = ns_to_ms(end - self.t_first) if self.t_first else 0.0
        out = {
            "text": self.text.decode("utf-8", "replace"),
            "token_ids": list(self.tokens),
            "finish_reason": _FINISH_NAMES.get(self.finish, FINISH_ERROR),
            "error_message": self.error_message.decode("utf-8", "replace"),
            "prompt_tokens": self.prompt_len,
            "cached_tokens": self.cached,
            "completion_tokens": n,
            "prefill_ms": ns_to_ms(self.t_prefill_end - self.t_start) if self.t_prefill_end else 0.0,
            "time_to_first_token_ms": ns_to_ms(self.t_first - self.t_start) if self.t_first else 0.0,
            "decode_ms": decode_ms,
            "decode_steps": self.decode_steps,
            "drafted_tokens": self.drafted,
            "accepted_tokens": self.accepted,
            "decode_forward_ms": ns_to_ms(self.forward_ns),
            "total_ms": ns_to_ms(end - self.t_start),
        }
        cdef int i
        cdef size_t j
        if self.sampler.p.top_logprobs >= 0:
            rows = []
            for i in range(n):
                top = []
                for j in range(self.top_logprobs[i].size()):
                    top.append((self.top_logprobs[i][j].second, self.top_logprobs[i][j].first))
                rows.append((self.tokens[i], self.logprobs[i], top))
            out["logprobs"] = rows
        return out
