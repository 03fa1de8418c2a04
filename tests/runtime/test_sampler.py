"""Properties of our sampler, checked on the real engine (tiny random model)."""

from __future__ import annotations

import math
from array import array

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mnn_engine import _mnn

PROMPTS = st.sampled_from([
    "Hello",
    "The capital of France is",
    "def fib(n):",
    "你好, 世界",
    "1 2 3 4",
])
SEEDS = st.integers(min_value=0, max_value=2**64 - 1)
TEMPERATURES = st.floats(min_value=0.05, max_value=3.0)
SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
N = 6  # tokens per generation: enough to see divergence, cheap on the tiny model


def _greedy(llm, prompt: str) -> tuple[int, ...]:
    return llm.generate(prompt, temperature=0, max_tokens=N, ignore_eos=True).token_ids


@SETTINGS
@given(prompt=PROMPTS, seed=SEEDS, temperature=TEMPERATURES)
def test_top_k_1_is_greedy(tiny, prompt, seed, temperature):
    sampled = tiny.generate(prompt, temperature=temperature, top_k=1, top_p=1.0, min_p=0.0,
                            seed=seed, max_tokens=N, ignore_eos=True)
    assert sampled.token_ids == _greedy(tiny, prompt)


@SETTINGS
@given(prompt=PROMPTS, seed=SEEDS, temperature=TEMPERATURES)
def test_tiny_top_p_is_greedy(tiny, prompt, seed, temperature):
    sampled = tiny.generate(prompt, temperature=temperature, top_k=0, top_p=1e-9, min_p=0.0,
                            seed=seed, max_tokens=N, ignore_eos=True)
    assert sampled.token_ids == _greedy(tiny, prompt)


@SETTINGS
@given(prompt=PROMPTS, seed=SEEDS)
def test_min_p_1_is_greedy(tiny, prompt, seed):
    sampled = tiny.generate(prompt, temperature=1.0, top_k=0, top_p=1.0, min_p=1.0,
                            seed=seed, max_tokens=N, ignore_eos=True)
    assert sampled.token_ids == _greedy(tiny, prompt)


@given(st.lists(st.one_of(st.floats(width=32, allow_nan=False), st.sampled_from([0.0, 1.0, -math.inf])),
                min_size=1, max_size=70))
def test_argmax_is_the_first_largest_logit(values):
    # few distinct values force ties; lengths around multiples of 8 cover the vector body and its tail
    expected = values.index(max(values))
    assert _mnn.argmax_logits(array("f", values)) == expected


@SETTINGS
@given(prompt=PROMPTS, seed=SEEDS, temperature=st.sampled_from([0.0, 0.7, 1.5]),
       bias=st.sampled_from([-math.inf, -100.0]))
def test_logit_bias_bans_a_token(tiny, prompt, seed, temperature, bias):
    banned = _greedy(tiny, prompt)[0]
    result = tiny.generate(prompt, temperature=temperature, seed=seed, max_tokens=N, ignore_eos=True,
                           logit_bias={banned: bias})
    assert banned not in result.token_ids


@SETTINGS
@given(prompt=PROMPTS, seed=SEEDS)
def test_logit_bias_can_force_a_token(tiny, prompt, seed):
    forced = 40  # an ordinary token
    result = tiny.generate(prompt, temperature=1.0, seed=seed, max_tokens=3, ignore_eos=True,
                           logit_bias={forced: 100.0})
    assert set(result.token_ids) == {forced}


@SETTINGS
@given(prompt=PROMPTS, seed=SEEDS, temperature=st.floats(min_value=0.0, max_value=5.0),
       top_k=st.integers(min_value=0, max_value=200_000), top_p=st.floats(min_value=1e-6, max_value=1.0),
       min_p=st.floats(min_value=0.0, max_value=1.0))
def test_ids_stay_inside_the_vocabulary(tiny, prompt, seed, temperature, top_k, top_p, min_p):
    result = tiny.generate(prompt, temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p,
                           seed=seed, max_tokens=N, ignore_eos=True)
    assert len(result.token_ids) == N
    assert all(0 <= t < tiny.vocab_size for t in result.token_ids)


@SETTINGS
@given(prompt=PROMPTS, seed=SEEDS, temperature=TEMPERATURES)
def test_same_seed_same_sample(tiny, prompt, seed, temperature):
    options = {"temperature": temperature, "top_k": 0, "top_p": 1.0, "min_p": 0.0, "seed": seed,
               "max_tokens": N, "ignore_eos": True}
    assert tiny.generate(prompt, **options).token_ids == tiny.generate(prompt, **options).token_ids


def test_high_temperature_sampling_spreads_over_many_tokens(tiny):
    seen = {tiny.generate("Hello", temperature=3.0, top_k=0, top_p=1.0, min_p=0.0, seed=s,
                          max_tokens=1, ignore_eos=True).token_ids[0] for s in range(40)}
    assert len(seen) > 20


@pytest.mark.parametrize("top_k", [2, 5])
def test_top_k_limits_the_choices(tiny, top_k):
    prompt = "Hello"
    ranked = tiny.generate(prompt, temperature=0, max_tokens=1, logprobs=True, top_logprobs=top_k)
    allowed = {t for t, _ in ranked.logprobs[0].top}
    seen = {tiny.generate(prompt, temperature=50.0, top_k=top_k, top_p=1.0, min_p=0.0, seed=s,
                          max_tokens=1).token_ids[0] for s in range(30)}
    assert seen <= allowed
    assert len(seen) == top_k  # a flat distribution over k tokens shows all of them
