# The generation loop: one generation's state, run without the GIL.
# Included by src/_mnn.pyx: one extension, a file per concept.

cdef inline cbool is_built(const vector[char]* built, int length) noexcept nogil:
    """Whether MNN's module for decode-time forwards of ``length`` tokens
    exists (length 1 is built at load)."""
    return length <= 1 or (<size_t>length < built.size() and built[0][length] != 0)


cdef inline void mark_built(vector[char]* built, int length) noexcept nogil:
    if <size_t>length >= built.size():
        built.resize(length + 1, 0)
    built[0][length] = 1


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
    cdef int context_length
    cdef cbool ignore_eos
    cdef cbool whole_prefill
    cdef cbool exact_reuse  # MNN's rows are batch-independent: prefill in the large chunks
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
    cdef vector[int] history  # prompt and output: where drafts are looked up, what the KV cache holds
    cdef vector[int] drafts
    cdef int drafted, accepted
    cdef double accept_s, accept_t  # faded successes and trials of draft tokens
    cdef int probe_wait, since_probe
    cdef cbool probing
    # test mode: verify drafts with one single-token forward each (the rows
    # plain decoding computes, bit for bit), to prove the loop itself lossless
    cdef cbool verify_serially
    cdef vector[char]* built_lengths  # the core's: lengths whose MNN module exists
    cdef object native_capture  # the core's: a context manager factory, or None
    cdef object capture  # the capture open around a module-building forward
    cdef vector[float] serial_rows

    cdef void capture_begin(self) noexcept nogil:
        """Open the core's capture of MNN's output (the GIL only for that:
        the forward inside runs without it)."""
        with gil:
            self.capture = None
            if self.native_capture is not None:
                try:
                    capture = self.native_capture()
                    capture.__enter__()
                    self.capture = capture
                except BaseException:
                    pass  # no capture: MNN's line reaches stdout, nothing worse

    cdef void capture_end(self) noexcept nogil:
        with gil:
            if self.capture is not None:
                try:
                    self.capture.__exit__(None, None, None)
                except BaseException:
                    pass
                self.capture = None

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
        logits_var = prefill(self.llm, prompt, keep, self.cancel_flag, self.whole_prefill, self.exact_reuse)
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
        self.history = prompt
        if self.spec_max > 0:
            if set_all_logits(self.llm, True):
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
            if <int>(kv_base + row + 2) >= self.context_length:
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
            elif is_built(self.built_lengths, k + 1):
                logits_var = self.llm.forward(ids, False)
                rows_base = read_all_logits(logits_var, &vocab, &rows)
            else:  # MNN builds this length's module first, and says so on stdout
                self.capture_begin()
                logits_var = self.llm.forward(ids, False)
                self.capture_end()
                mark_built(self.built_lengths, k + 1)
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
        if nrows > 1 and row + 1 < nrows:
            # drafts verified but not kept: out of the KV cache, which then
            # holds the history but its last token (the prompt cache's view)
            self.llm.eraseHistory(kv_base + 1 + row, 0)
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
        if kv_len + 1 + most > self.context_length - 1:
            most = self.context_length - 2 - kv_len
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

    cdef GenerationOutcome outcome(self):
        cdef GenerationOutcome out = GenerationOutcome()
        cdef int64_t end = self.t_end
        cdef int n = <int>self.tokens.size()
        cdef int i
        cdef size_t j
        out.text = self.text.decode("utf-8", "replace")
        out.token_ids = tuple(self.tokens)
        out.finish_reason = _FINISH_NAMES.get(self.finish, FINISH_ERROR)
        out.error_message = self.error_message.decode("utf-8", "replace")
        out.prompt_tokens = self.prompt_len
        out.cached_tokens = self.cached
        out.completion_tokens = n
        out.prefill_ms = ns_to_ms(self.t_prefill_end - self.t_start) if self.t_prefill_end else 0.0
        out.time_to_first_token_ms = ns_to_ms(self.t_first - self.t_start) if self.t_first else 0.0
        out.decode_ms = ns_to_ms(end - self.t_first) if self.t_first else 0.0
        out.decode_steps = self.decode_steps
        out.drafted_tokens = self.drafted
        out.accepted_tokens = self.accepted
        out.decode_forward_ms = ns_to_ms(self.forward_ns)
        out.total_ms = ns_to_ms(end - self.t_start)
        if self.sampler.p.top_logprobs >= 0:
            rows = []
            for i in range(n):
                top = []
                for j in range(self.top_logprobs[i].size()):
                    top.append((self.top_logprobs[i][j].second, self.top_logprobs[i][j].first))
                rows.append((self.tokens[i], self.logprobs[i], tuple(top)))
            out.logprobs = tuple(rows)
        return out
