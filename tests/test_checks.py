"""The one way to refuse a bad argument (``mnn_engine.checks``): each rule
takes what it says and refuses the rest in the one message format, and no
module of the package builds a refusal of its own."""

from __future__ import annotations

import math
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st
from support import REPO

from mnn_engine.checks import MAX_QUOTED, Rule, boolean, choice, integer, invalid, number, obj, string, strings
from mnn_engine.errors import MnnEngineError

#: any JSON value a request may carry
JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4),
                    max_leaves=12)
REFUSAL = re.compile(r"^(?P<param>[\w.\[\]]+): must be (?P<what>.+) \(got (?P<got>.*)\)$", re.S)


def refused(call) -> MnnEngineError:
    with pytest.raises(MnnEngineError) as caught:
        call()
    assert caught.value.code == "invalid_argument"
    return caught.value


@given(JSON, st.integers(-5, 5), st.integers(0, 10))
def test_an_integer_rule_takes_ints_in_range_and_never_a_bool(value, low, span):
    high = low + span
    fits = isinstance(value, int) and not isinstance(value, bool) and low <= value <= high
    if fits:
        assert integer(value, "n", low=low, high=high) == value
    else:
        error = refused(lambda: integer(value, "n", low=low, high=high))
        match = REFUSAL.match(error.message)
        assert match and match["param"] == "n" == error.param
        assert match["what"] == f"an integer from {low} to {high}"


@given(JSON)
def test_a_number_rule_refuses_bools_nan_and_infinities(value):
    fits = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0
    if fits:
        assert number(value, "top_p", low=0, above=True) == value
    else:
        error = refused(lambda: number(value, "top_p", low=0, above=True))
        assert error.message.startswith("top_p: must be a number above 0 (got ")


@given(JSON)
def test_the_kinds_take_their_own_values_only(value):
    for check, fits in ((boolean, isinstance(value, bool)), (string, isinstance(value, str)),
                        (obj, isinstance(value, dict)),
                        (strings, isinstance(value, list) and all(isinstance(v, str) for v in value))):
        if fits:
            assert check(value, "x") is value
        else:
            assert REFUSAL.match(refused(lambda check=check: check(value, "x")).message)


def test_none_is_taken_only_where_said_and_the_refusal_says_so():
    assert integer(None, "seed", nullable=True) is None
    assert refused(lambda: integer(None, "seed")).message == "seed: must be an integer (got None)"
    assert refused(lambda: choice("x", "mode", ("a", "b"), nullable=True)).message == \
        "mode: must be one of a, b (or none) (got 'x')"
    assert refused(lambda: choice(3, "quant_qkv", (0, 1, 2), why="3 is broken")).message == \
        "quant_qkv: must be one of 0, 1, 2 (got 3; 3 is broken)"


def test_a_huge_refused_value_is_quoted_short():
    body = ["x" * 1000] * 1000
    message = refused(lambda: obj(body, "body")).message
    assert message.startswith("body: must be a JSON object (got ['xxx") and len(message) < MAX_QUOTED + 60


def test_bounds_are_shown_whole_for_ints_and_short_for_floats():
    assert Rule(int, low=-(2**63), high=2**64 - 1).said() == f"an integer from {-(2**63)} to {2**64 - 1}"
    assert Rule(float, low=0.0, high=2.0).said() == "a number from 0 to 2"
    assert Rule(float, low=0, above=True, high=1).said() == "a number above 0 and at most 1"


def test_invalid_names_the_parameter_unless_verbatim():
    assert invalid("stop", "at most 16").message == "stop: at most 16"
    assert invalid("model", "model is required", verbatim=True).message == "model is required"


def test_no_module_builds_a_refusal_of_its_own():
    """Every invalid_argument goes through checks.py; the old per-dialect factory is gone."""
    offenders = []
    for path in sorted((REPO / "mnn_engine").rglob("*.py")):
        if path.name == "checks.py":
            continue
        text = path.read_text()
        for pattern in ('MnnEngineError("invalid_argument"', "def bad(", "isinstance(value, bool)"):
            if pattern in text:
                offenders.append(f"{path.relative_to(REPO)}: {pattern}")
    assert offenders == []
