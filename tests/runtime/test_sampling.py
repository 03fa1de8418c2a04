"""GenerationConfig validation and resolution (pure Python)."""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mnn_engine import ERROR_CODES, GenerationConfig, MnnEngineError


def test_defaults_come_from_the_model():
    params = GenerationConfig().resolved({"temperature": 0.7, "top_k": 40, "top_p": 0.9}, vocab_size=100)
    assert params.temperature == 0.7 and params.top_k == 40 and params.top_p == 0.9
    assert params.min_p == 0.0 and params.top_logprobs == -1 and params.logit_bias == {}


def test_request_values_override_the_model():
    params = GenerationConfig(temperature=0.0, top_p=0.5).resolved({"temperature": 0.7}, vocab_size=100)
    assert params.temperature == 0.0 and params.top_p == 0.5


def test_openai_forms_are_accepted():
    config = GenerationConfig.from_kwargs(stop="END", logit_bias={"42": -100}, max_tokens=-1)
    assert config.stop == ("END",)
    assert config.logit_bias == {42: -100}
    assert GenerationConfig.from_kwargs(stop=None, logit_bias=None).stop == ()


def test_logit_bias_outside_the_vocabulary():
    with pytest.raises(MnnEngineError) as err:
        GenerationConfig(logit_bias={100: 1.0}).resolved({}, vocab_size=100)
    assert err.value.param == "logit_bias"


def test_seed_is_unsigned_64_bit():
    assert GenerationConfig(seed=-1).effective_seed() == 2**64 - 1
    assert 0 <= GenerationConfig().effective_seed() < 2**64


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(
    st.sampled_from(["max_tokens", "temperature", "top_k", "top_p", "min_p", "repetition_penalty",
                     "presence_penalty", "frequency_penalty", "seed", "top_logprobs"]),
    st.one_of(st.integers(-(2**70), 2**70), st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=3),
              st.booleans(), st.none()),
))
def test_validation_never_crashes(options):
    try:
        config = GenerationConfig.from_kwargs(**options)
    except MnnEngineError as exc:
        assert exc.code == "invalid_argument"
        assert exc.param in options
        return
    params = config.resolved({}, vocab_size=1000)
    assert math.isfinite(params.temperature) and params.temperature >= 0
    assert 0 < params.top_p <= 1


def test_error_codes_are_a_stable_table():
    assert {"invalid_argument", "empty_prompt", "busy", "model_not_found", "invalid_model",
            "model_load_failed", "model_not_loaded", "context_length_exceeded"} <= set(ERROR_CODES)
    for code, kind in ERROR_CODES.items():
        assert code == code.lower() and " " not in code
        assert 400 <= kind.http_status < 600
    with pytest.raises(ValueError):
        MnnEngineError("no_such_code", "x")
    err = MnnEngineError("busy", "one at a time")
    assert str(err) == "[busy] one at a time" and err.kind.http_status == 429
