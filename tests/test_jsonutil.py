"""mnn_engine.jsonutil gives the same results with orjson (the [fast] extra)
and with the standard library (Termux has no orjson package)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mnn_engine import jsonutil

orjson = pytest.importorskip("orjson")  # installed by the [test] extra

TRICKY = [
    b'"\\ud800"',  # an escaped lone surrogate: valid JSON (RFC 8259 section 8.2), orjson refuses it
    b'{"messages": [{"role": "user", "content": "\\udfff"}]}',
    b"[" * 2000 + b"]" * 2000,  # past orjson's 1,024 levels
    b"NaN", b"[Infinity]", b"{", b"", b'{"a": 1} x',
]


def _outcome(text: bytes):
    try:
        return "ok", jsonutil.loads(text)
    except RecursionError:
        return "deep", None
    except ValueError:
        return "bad", None


@pytest.mark.parametrize("text", TRICKY)
def test_both_backends_agree_on_tricky_input(monkeypatch, text):
    fast = _outcome(text)
    monkeypatch.setattr(jsonutil, "orjson", None)
    assert fast == _outcome(text)


def test_an_integer_past_64_bits_is_no_integer_to_either_backend_s_fields(monkeypatch):
    # the one difference: orjson reads it as a float; the standard library as an int no field admits
    from mnn_engine import GenerationConfig, MnnEngineError

    for backend in (orjson, None):
        monkeypatch.setattr(jsonutil, "orjson", backend)
        value = jsonutil.loads(b'{"max_tokens": 12345678901234567890123}')["max_tokens"]
        with pytest.raises(MnnEngineError) as err:
            GenerationConfig.from_kwargs(max_tokens=value)
        assert err.value.param == "max_tokens"


@given(st.recursive(st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.text(),
                    lambda inner: st.lists(inner) | st.dictionaries(st.text(), inner), max_leaves=20))
def test_both_backends_read_what_either_writes(value):
    assert jsonutil.loads(jsonutil.dumps(value)) == value
    assert jsonutil.loads(orjson.dumps(value)) == value
