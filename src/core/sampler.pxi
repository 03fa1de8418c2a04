# The sampler: penalties, biases, the grammar mask, top-k/top-p/min-p, logprobs.
# Included by src/_mnn.pyx: one extension, a file per concept.

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


cdef void most_likely(const float* w, int n, double lse, int k, vector[pair[float, int]]* scratch,
                      vector[pair[float, int]]* out) noexcept nogil:
    """``out``: the ``k`` largest of the ``n`` logits ``w`` as (log-probability, token),
    most likely first (``lse``: their log-sum-exp); ``scratch`` is reused between calls."""
    cdef int i
    out.clear()
    if k <= 0:
        return
    if k > n:
        k = n
    scratch.resize(n)
    for i in range(n):
        scratch[0][i].first = -w[i]
        scratch[0][i].second = i
    partial_sort(scratch.begin(), scratch.begin() + k, scratch.end())
    for i in range(k):
        out.push_back(pair[float, int](<float>(-scratch[0][i].first - lse), scratch[0][i].second))


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
        cdef double d
        for i in range(self.vocab):
            w[i] = logits[i]
        if rep != 1.0:
            for i in range(<int>self.seen_list.size()):
                t = self.seen_list[i]
                v = w[t]
                # a huge penalty (1e308 passes validation) must not make a logit -inf: when a grammar allows
                # only penalised tokens (EOS after a closed JSON object), -inf everywhere left the choice to
                # index 0, a token the grammar refuses; the least likely stays a finite float
                d = v / rep if v > 0 else v * rep
                w[t] = <float>(d if d > -FLT_MAX else -FLT_MAX)
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
        cdef double lse = log_sum_exp(w, self.vocab)
        self.last_logprob = <float>(w[token] - lse)
        most_likely(w, self.vocab, lse, self.p.top_logprobs, &self.cand, &self.last_top)

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
