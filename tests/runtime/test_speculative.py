"""Speculative decoding (prompt lookup) in the native loop.

Lossless by construction: a draft token is kept only when the sampler draws
it at its position. The loop itself is proven against plain decoding with
drafts verified one single-token forward at a time (the test hook
``_verify_serially``): then the logits are plain decoding's, bit for bit,
and everything else (drafting, acceptance, KV-cache erasure, the random
stream, penalties, biases, grammar, stop strings, limits, logprobs, cancel)
is the loop's. With MNN's batched verification the outputs are plain
decoding's too, token for token and in log-probabilities, in the int4
low-memory mode, where our MNN patch makes a batch's rows a lone row's
(``Llm.batch_exact``; tests/runtime/test_batch_exactness.py); an unpatched
MNN (the PyPI wheel's) drifts there, and then only what does not depend on
the logits' last bits is asserted.
"""

from __future__ import annotations

import contextlib
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support import MNN_BATCH_EXACT, SCRIPTED_TEXT, test_model_dir

from mnn_engine import GenerationConfig, Llm, LoadOptions, MnnEngineError

PASSAGE = ("The Amazon rainforest covers much of the Amazon basin of South America. The basin encompasses seven "
           "million square kilometres, of which five and a half million square kilometres are covered by the "
           "rainforest. The region includes territory belonging to nine nations.")
REWRITE = [{"role": "user", "content": "Rewrite the passage below, replacing 'rainforest' with 'jungle' and "
                                       f"changing nothing else:\n\n{PASSAGE}"}]
GROUNDED = [
    REWRITE,
    [{"role": "user", "content": f"Summarise this passage in two sentences, reusing its wording:\n\n{PASSAGE}"}],
    [{"role": "user", "content": f"Passage:\n{PASSAGE}\n\nUsing only the passage, how large is the basin? "
                                 f"Quote the passage."}],
]


@pytest.fixture(scope="module")
def smol():
    """SmolLM2's real weights, int4 low-memory mode (the default), speculation on."""
    with Llm(test_model_dir("smollm2-135m"), thread_num=1, speculative="ngram", draft_tokens=5) as llm:
        yield llm


@contextlib.contextmanager
def _serially(llm: Llm):
    """Verify drafts with single-token forwards (plain decoding's logits)."""
    llm._verify_serially = True
    try:
        yield
    finally:
        llm._verify_serially = False


@contextlib.contextmanager
def _cheap_verification(llm: Llm):
    """Drafting weighed against fixed verification costs at which drafts pay, not the measured ones
    (which sit near the break-even point on some builds, so measurement noise decided the test)."""
    with llm._using() as core:
        core.set_verify_costs([1.0 + i / 5 for i in range(llm.draft_tokens + 1)])
    try:
        yield
    finally:
        with llm._using() as core:
            core.set_verify_costs(llm.verify_costs)


def _same(a, b):
    assert a.token_ids == b.token_ids
    assert a.text == b.text
    assert a.finish_reason == b.finish_reason
    assert a.logprobs == b.logprobs


_SAMPLING = st.fixed_dictionaries({}, optional={
    "temperature": st.sampled_from([0, 0.3, 0.7, 1.0, 1.3]),
    "top_k": st.integers(0, 50),
    "top_p": st.floats(0.5, 1.0),
    "min_p": st.floats(0.0, 0.2),
    "repetition_penalty": st.floats(1.0, 1.3),
    "presence_penalty": st.floats(-0.5, 0.5),
    "frequency_penalty": st.floats(-0.5, 0.5),
    "seed": st.integers(0, 2**32),
    "logit_bias": st.dictionaries(st.integers(0, 49151), st.floats(-5, 5), max_size=3),
    "stop": st.lists(st.sampled_from(["basin", "kilometres", ". The", "jungle", "\n\n"]), max_size=2),
    "max_tokens": st.integers(1, 48),
    "logprobs": st.just(True),
})


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.sampled_from(GROUNDED), _SAMPLING, st.integers(1, 7))
def test_the_loop_is_lossless_with_plain_decodings_logits(smol, prompt, sampling, draft_tokens):
    """Same logits (serial verification) -> the same answer as plain decoding,
    whatever the sampler does."""
    if sampling.get("logprobs"):
        sampling["top_logprobs"] = 2
    sampling.setdefault("max_tokens", 48)
    sampling.setdefault("seed", 1)  # unset, each call draws its own
    plain = smol.generate(prompt, speculative="off", **sampling)
    with _serially(smol):
        drafted = smol.generate(prompt, draft_tokens=draft_tokens, **sampling)
    _same(plain, drafted)
    assert drafted.accepted_tokens <= drafted.drafted_tokens
    assert drafted.decode_steps + drafted.accepted_tokens >= drafted.completion_tokens - 1


@pytest.mark.skipif(not MNN_BATCH_EXACT, reason="needs patch 0002 where it is shown exact (tests/support.py)")
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.sampled_from(GROUNDED), _SAMPLING, st.integers(1, 7))
def test_batched_verification_in_int4_is_plain_decoding(smol, prompt, sampling, draft_tokens):
    """MNN's batched forwards (int4 low-memory weights, the default mode)
    give the verification plain decoding's logits: the same answer and the
    same log-probabilities, whatever the sampler does."""
    assert smol.batch_exact
    if sampling.get("logprobs"):
        sampling["top_logprobs"] = 2
    sampling.setdefault("max_tokens", 48)
    sampling.setdefault("seed", 1)
    plain = smol.generate(prompt, speculative="off", **sampling)
    drafted = smol.generate(prompt, draft_tokens=draft_tokens, **sampling)
    _same(plain, drafted)


def test_drafts_are_made_and_kept_on_grounded_prompts(smol):
    with _serially(smol), _cheap_verification(smol):
        results = [smol.generate(p, temperature=0, max_tokens=64) for p in GROUNDED]
    assert sum(r.drafted_tokens for r in results) > 20
    assert sum(r.accepted_tokens for r in results) > 10
    for r in results:  # one forward per decoded token that was not a kept draft
        assert r.usage["speculative"] == {"drafted_tokens": r.drafted_tokens, "accepted_tokens": r.accepted_tokens}
        # OpenAI's Predicted Outputs fields count a request's prediction, which no request here sent
        assert r.usage["completion_tokens_details"] == {"accepted_prediction_tokens": 0,
                                                        "rejected_prediction_tokens": 0}


def test_structured_output_is_unchanged_by_speculation(smol):
    pytest.importorskip("llguidance")
    schema = {"type": "object", "properties": {"country": {"type": "string"}, "share": {"type": "integer"}},
              "required": ["country", "share"], "additionalProperties": False}
    fmt = {"type": "json_schema", "json_schema": {"name": "s", "schema": schema}}
    prompt = [{"role": "user", "content": f"{PASSAGE}\n\nAnswer in JSON: which country holds most of the forest?"}]
    for sampling in ({"temperature": 0}, {"temperature": 0.9, "seed": 4}):
        plain = smol.generate(prompt, speculative="off", response_format=fmt, max_tokens=48, **sampling)
        with _serially(smol):
            drafted = smol.generate(prompt, response_format=fmt, max_tokens=48, **sampling)
        _same(plain, drafted)


def test_batched_verification_keeps_limits_cancel_and_usage(smol):
    """What holds whatever the last bits of the logits: max_tokens exactly,
    the context limit, a cancel before the next token, stop strings cut."""
    with _cheap_verification(smol):
        result = smol.generate(REWRITE, temperature=0, max_tokens=37, ignore_eos=True)
    assert result.completion_tokens == 37 and result.finish_reason == "length"
    assert result.drafted_tokens > 0 and result.accepted_tokens > 0
    assert result.decode_steps + result.accepted_tokens == 36
    calls = []

    def cancel_at_ten(piece):
        calls.append(piece)
        if len(calls) == 10:
            smol.cancel()

    cancelled = smol.generate(REWRITE, cancel_at_ten, temperature=0, max_tokens=100, ignore_eos=True)
    assert cancelled.finish_reason == "cancelled" and cancelled.completion_tokens == 10
    stopped = smol.generate(REWRITE, temperature=0, max_tokens=100, stop=["jungle"])
    assert "jungle" not in stopped.text


def test_the_context_limit_is_kept_exactly():
    with Llm(test_model_dir("smollm2-135m"), thread_num=1, speculative="ngram", max_all_tokens=160) as llm:
        plain = llm.generate(REWRITE, temperature=0, ignore_eos=True, speculative="off")
        fast = llm.generate(REWRITE, temperature=0, ignore_eos=True)
        with _serially(llm):
            serial = llm.generate(REWRITE, temperature=0, ignore_eos=True)
    assert plain.finish_reason == fast.finish_reason == "length"
    assert fast.completion_tokens == plain.completion_tokens == 160 - plain.prompt_tokens
    assert fast.accepted_tokens > 0
    _same(plain, serial)
    if MNN_BATCH_EXACT:
        _same(plain, fast)


def test_with_float_weights_batched_verification_changes_no_token():
    """MNN's float kernels give a verification the logits of single-token
    steps, so the default "auto" turns speculation on there."""
    with Llm(test_model_dir("smollm2-135m"), thread_num=1, memory="normal") as llm:
        assert llm.speculative_default == "ngram" and len(llm.verify_costs) == 8
        accepted = 0
        for prompt in GROUNDED:
            plain = llm.generate(prompt, temperature=0, max_tokens=64, speculative="off")
            fast = llm.generate(prompt, temperature=0, max_tokens=64)
            _same(plain, fast)
            accepted += fast.accepted_tokens
        assert accepted > 10


def test_auto_follows_the_load_time_exactness_check():
    """int4 low-memory weights: "auto" drafts where MNN's batched rows are a
    lone row's (costs measured at load), else it stays off (costs measured
    on first use of speculative="ngram")."""
    with Llm(test_model_dir("tiny-scripted"), thread_num=1) as llm:
        exact = llm.batch_exact
        assert llm.speculative == "auto" and (exact or not MNN_BATCH_EXACT)
        if exact:
            assert llm.speculative_default == "ngram" and len(llm.verify_costs) == 8
        else:
            assert llm.speculative_default == "off" and llm.verify_costs == []
            assert llm.generate("Hi", max_tokens=8).drafted_tokens == 0
        prompt = [{"role": "user", "content": f"Say: {SCRIPTED_TEXT} {SCRIPTED_TEXT}"}]
        plain = llm.generate(prompt, temperature=0, speculative="off", logprobs=True)
        measured = llm.generate(prompt, temperature=0, speculative="ngram", draft_tokens=3, logprobs=True)
        assert len(llm.verify_costs) == (8 if exact else 4) and llm.verify_costs[0] == 1.0
        # whether the measured costs make a draft pay depends on the CPU (the PyPI wheel's AVX2 kernels on a
        # Zen 4 VM: 2 rows cost 1.95 of one, so nothing was drafted); the answer must not
        assert measured.text == SCRIPTED_TEXT
        with _cheap_verification(llm):
            result = llm.generate(prompt, temperature=0, speculative="ngram", draft_tokens=3, logprobs=True)
        assert result.text == SCRIPTED_TEXT and result.accepted_tokens > 0
        if exact:
            _same(plain, measured)
            _same(plain, result)


@pytest.mark.parametrize(("options", "param"), [
    ({"speculative": "lookahead"}, "speculative"), ({"draft_tokens": 0}, "draft_tokens"),
    ({"draft_tokens": 16}, "draft_tokens"), ({"draft_tokens": True}, "draft_tokens"),
])
def test_bad_options_are_refused(options, param):
    with pytest.raises(MnnEngineError) as err:
        GenerationConfig.from_kwargs(**options)
    assert err.value.param == param
    with pytest.raises(MnnEngineError) as err:
        LoadOptions(**options).validate()
    assert err.value.param == param


def test_an_unknown_memory_mode_is_refused():
    with pytest.raises(MnnEngineError) as err:
        LoadOptions(memory="tiny").validate()
    assert err.value.param == "memory"


def test_the_server_reports_drafts_in_usage(tmp_path):
    from live_server import Live

    live = Live(tmp_path, "tiny-scripted")
    try:
        messages = [{"role": "user", "content": f"Say: {SCRIPTED_TEXT}"}]
        status, _, body = live.post_json({"messages": messages, "temperature": 0, "speculative": "ngram",
                                          "draft_tokens": 4})
        assert status == 200, body
        assert body["choices"][0]["message"]["content"] == SCRIPTED_TEXT
        assert body["usage"]["speculative"]["accepted_tokens"] > 0
        assert body["usage"]["completion_tokens_details"]["accepted_prediction_tokens"] == 0  # no prediction sent
        response = live.client.chat.completions.create(model="x", messages=messages, temperature=0,
                                                       extra_body={"speculative": "off"})
        assert response.usage.model_extra["speculative"] == {"drafted_tokens": 0, "accepted_tokens": 0}
        status, _, body = live.post_json({"messages": messages, "speculative": "always"})
        assert status == 400 and body["error"]["param"] == "speculative"
        expected = "ngram" if MNN_BATCH_EXACT else "off"  # "auto" in int4: on where batched rows are exact
        assert json.loads(live.request("GET", "/health")[2])["model"]["speculative"] == expected
    finally:
        live.close()
