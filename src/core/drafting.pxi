# Drafts for speculative decoding (found by prompt lookup, n-grams) and their tuning constants.
# Included by src/_mnn.pyx: one extension, a file per concept.

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
