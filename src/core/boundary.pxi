# The typed boundary between the Python layer and the loop: what a
# generation is asked to do (GenerationSettings) and what it did
# (GenerationOutcome). Each is declared once, here; mnn_engine.runtime
# builds the first and wraps the second.
# Included by src/_mnn.pyx: one extension, a file per concept.

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


cdef class GenerationSettings:
    """Everything one generation's loop reads, typed. Built by
    ``GenerationConfig.resolved`` (the sampler) and completed by the
    prepared generation (the rest); an unknown name is an AttributeError
    where it is set, never a KeyError on the generation thread."""

    cdef SamplerParams sampler
    cdef vector[pair[int, float]] bias
    cdef vector[string] stops
    cdef public uint64_t seed
    cdef public int max_tokens        # -1: no limit but the context
    cdef public int context_length
    cdef public bint ignore_eos
    cdef public bint reuse            # keep the prompt prefix the KV cache holds
    cdef public bint whole_prefill    # the prompt in one forward (images, audio: MNN's Omni needs it so)
    cdef public int draft_tokens      # 0: plain decoding
    cdef public bint verify_serially  # test mode: single-token verifying forwards

    def __init__(self, *, double temperature, int top_k, double top_p, double min_p,
                 double repetition_penalty, double presence_penalty, double frequency_penalty,
                 int top_logprobs, logit_bias):
        self.sampler.temperature = temperature
        self.sampler.top_k = top_k
        self.sampler.top_p = top_p
        self.sampler.min_p = min_p
        self.sampler.repetition_penalty = repetition_penalty
        self.sampler.presence_penalty = presence_penalty
        self.sampler.frequency_penalty = frequency_penalty
        self.sampler.top_logprobs = top_logprobs
        for token, value in logit_bias.items():
            self.bias.push_back(pair[int, float](token, value))
        self.seed = 0
        self.max_tokens = -1
        self.context_length = 2048
        self.ignore_eos = False
        self.reuse = True
        self.whole_prefill = False
        self.draft_tokens = 0
        self.verify_serially = False

    @property
    def temperature(self) -> float:
        return self.sampler.temperature

    @property
    def top_k(self) -> int:
        return self.sampler.top_k

    @property
    def top_p(self) -> float:
        return self.sampler.top_p

    @property
    def min_p(self) -> float:
        return self.sampler.min_p

    @property
    def repetition_penalty(self) -> float:
        return self.sampler.repetition_penalty

    @property
    def presence_penalty(self) -> float:
        return self.sampler.presence_penalty

    @property
    def frequency_penalty(self) -> float:
        return self.sampler.frequency_penalty

    @property
    def top_logprobs(self) -> int:
        """-1: no logprobs; 0..20: the chosen token's, and that many alternatives."""
        return self.sampler.top_logprobs

    @property
    def logit_bias(self) -> dict:
        return {p.first: p.second for p in self.bias}

    @property
    def stop(self) -> tuple:
        return tuple(s.decode("utf-8") for s in self.stops)

    @stop.setter
    def stop(self, strings) -> None:
        self.stops.clear()
        for s in strings:
            self.stops.push_back(s.encode("utf-8"))


cdef class GenerationOutcome:
    """What one run of the loop produced, and how fast (milliseconds).
    Constructed empty, it is a generation cancelled before its prefill."""

    cdef readonly str text
    cdef readonly tuple token_ids
    cdef readonly str finish_reason
    cdef readonly str error_message
    cdef readonly int prompt_tokens
    cdef readonly int cached_tokens       # prompt tokens the KV cache already held
    cdef readonly int completion_tokens
    cdef readonly double prefill_ms
    cdef readonly double time_to_first_token_ms
    cdef readonly double decode_ms
    cdef readonly int decode_steps        # decode forwards
    cdef readonly int drafted_tokens
    cdef readonly int accepted_tokens
    cdef readonly double decode_forward_ms  # inside MNN's decode forwards
    cdef readonly double total_ms
    #: None, or per token (token id, logprob, ((alternative id, logprob), ...))
    cdef readonly object logprobs

    def __cinit__(self):
        self.text = ""
        self.token_ids = ()
        self.finish_reason = FINISH_CANCELLED
        self.error_message = ""
        self.logprobs = None
