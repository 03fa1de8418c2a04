"""What evaluation harnesses ask of a server (lm-eval's ``local-completions``,
after lm_eval/models/openai_completions.py and lm_eval/utils.py's
RemoteTokenizer, 0.4.13): the prompt's log-probabilities on
``/v1/completions`` (``echo`` with ``logprobs``, ``max_tokens: 0`` to score
only), lists of prompts answered as choices, and vLLM's tokenizer routes
(``GET /tokenizer_info``, ``/tokenize`` with ``prompt``, ``/detokenize``'s
``prompt``). Checked against the Python API's scoring and a forward done by
hand, on a real server."""

from __future__ import annotations

import json
import math
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from live_server import Live, server_fixture, sse_events

from mnn_engine import _mnn

tiny = server_fixture("tiny")


def _post(live: Live, path: str, body) -> tuple[int, dict]:
    status, _, raw = live.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
    return status, json.loads(raw)


def _complete(live: Live, **body) -> dict:
    status, answer = _post(live, "/v1/completions", {"temperature": 0, **body})
    assert status == 200, answer
    return answer


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ids=st.lists(st.integers(0, 20000), min_size=1, max_size=24), top=st.integers(0, 5))
def test_echoed_prompt_logprobs_are_the_python_apis_scores(tiny, ids, top):
    answer = _complete(tiny, prompt=ids, echo=True, logprobs=top, max_tokens=0)
    [choice] = answer["choices"]
    logprobs = choice["logprobs"]
    assert choice["finish_reason"] == "length" and choice["text"] == tiny.engine.llm.detokenize(ids)
    assert answer["usage"] == {"prompt_tokens": len(ids), "completion_tokens": 0, "total_tokens": len(ids)}
    assert logprobs["token_logprobs"][0] is None and logprobs["top_logprobs"][0] is None  # as OpenAI's legacy API
    assert len(logprobs["tokens"]) == len(ids)
    if len(ids) > 1:
        scored = tiny.engine.llm.score(ids[:1], ids[1:], top_logprobs=top)
        assert logprobs["token_logprobs"][1:] == list(scored.logprobs)
        alternatives = [[lp for _, lp in position] for position in scored.top] if top else [[]] * (len(ids) - 1)
        assert [sorted(t.values(), reverse=True) for t in logprobs["top_logprobs"][1:]] == [
            sorted(a, reverse=True)[:len(t)] for a, t in zip(alternatives, logprobs["top_logprobs"][1:], strict=True)]
        assert all(len(t) <= top for t in logprobs["top_logprobs"][1:])  # two tokens may share a text


def _log_softmax_at(row: tuple[float, ...], token: int) -> float:
    peak = max(row)
    return row[token] - peak - math.log(math.fsum(math.exp(x - peak) for x in row))


def test_prompt_logprobs_are_a_forward_done_by_hand(tiny):
    """One forward over the whole prompt (all rows of logits, log-softmax here) against the route's scores:
    equal to float32 rounding where MNN's rows are batch-exact, within 0.05 nats elsewhere (an unpatched
    MNN quantises a batch's activations with other scales than a lone row's)."""
    llm = tiny.engine.llm
    ids = llm.tokenize("The capital of France is Paris, and the capital of Italy is Rome.")
    answer = _complete(tiny, prompt=ids, echo=True, logprobs=1, max_tokens=0)
    served = answer["choices"][0]["logprobs"]["token_logprobs"][1:]
    with llm.claim() as claim:
        raw = _mnn.forward_rows(claim.core, [], [ids])  # the prompt in one batch: row i predicts token i + 1
    vocab = len(raw) // 4 // len(ids)
    rows = [struct.unpack_from(f"{vocab}f", raw, i * vocab * 4) for i in range(len(ids) - 1)]
    by_hand = [_log_softmax_at(row, token) for row, token in zip(rows, ids[1:], strict=True)]
    tolerance = 1e-5 if llm.batch_exact else 0.05
    assert max(abs(a - b) for a, b in zip(served, by_hand, strict=True)) <= tolerance


def test_echo_with_logprobs_then_the_answer(tiny):
    plain = _complete(tiny, prompt="Hello there", max_tokens=5, logprobs=2, ignore_eos=True)
    echoed = _complete(tiny, prompt="Hello there", max_tokens=5, logprobs=2, ignore_eos=True, echo=True)
    prompt_tokens = len(tiny.engine.llm.tokenize("Hello there"))
    generated, both = plain["choices"][0]["logprobs"], echoed["choices"][0]["logprobs"]
    assert echoed["choices"][0]["text"] == "Hello there" + plain["choices"][0]["text"]
    assert both["token_logprobs"][prompt_tokens:] == generated["token_logprobs"]
    assert both["tokens"][prompt_tokens:] == generated["tokens"]
    assert both["text_offset"][prompt_tokens] == len("Hello there") and both["text_offset"] == sorted(
        both["text_offset"])
    assert echoed["usage"] == plain["usage"]
    ids = tiny.engine.llm.tokenize("Hello there")  # token ids are echoed as their text
    by_ids = _complete(tiny, prompt=ids, max_tokens=5, logprobs=2, ignore_eos=True, echo=True)
    assert by_ids["choices"][0]["text"] == echoed["choices"][0]["text"] and by_ids["usage"] == plain["usage"]
    text_only = _complete(tiny, prompt="Hello there", max_tokens=5, ignore_eos=True, echo=True)
    assert text_only["choices"][0]["text"] == echoed["choices"][0]["text"] and text_only["usage"] == plain["usage"]


def test_lists_of_prompts_are_choices_in_order(tiny):
    llm = tiny.engine.llm
    texts = ["Hello", "Goodbye, my friend", "Once upon a time"]
    alone = [_complete(tiny, prompt=t, max_tokens=4, ignore_eos=True) for t in texts]
    listed = _complete(tiny, prompt=texts, max_tokens=4, ignore_eos=True)
    assert [c["index"] for c in listed["choices"]] == [0, 1, 2]
    assert [c["text"] for c in listed["choices"]] == [a["choices"][0]["text"] for a in alone]
    assert listed["usage"]["prompt_tokens"] == sum(a["usage"]["prompt_tokens"] for a in alone)
    by_ids = _complete(tiny, prompt=[llm.tokenize(t) for t in texts], max_tokens=4, ignore_eos=True)
    assert [c["text"] for c in by_ids["choices"]] == [c["text"] for c in listed["choices"]]
    status, _, raw = tiny.request("POST", "/v1/completions", json.dumps({
        "prompt": texts, "max_tokens": 4, "ignore_eos": True, "temperature": 0, "stream": True,
        "stream_options": {"include_usage": True}}), {"Content-Type": "application/json"})
    assert status == 200
    events = sse_events(raw)
    assert events[-1] == "[DONE]" and events[-2]["usage"] == listed["usage"]
    streamed = ["".join(e["choices"][0]["text"] for e in events[:-2] if e["choices"][0]["index"] == i)
                for i in range(3)]
    assert streamed == [c["text"] for c in listed["choices"]]
    indexes = [e["choices"][0]["index"] for e in events[:-2]]
    assert indexes == sorted(indexes)  # one prompt after the other


@pytest.mark.parametrize(("body", "param"), [
    ({"prompt": ["x"] * 65}, "prompt"),
    ({"prompt": ["x", ""]}, "prompt"),
    ({"prompt": [[1, 2], [-1]]}, "prompt"),
    ({"prompt": "x", "max_tokens": 0}, "max_tokens"),  # nothing to answer without echo
])
def test_malformed_prompt_lists_are_400s(tiny, body, param):
    status, answer = _post(tiny, "/v1/completions", body)
    assert status == 400 and answer["error"]["param"] == param


def test_a_prompt_past_the_context_is_refused_before_scoring(tiny):
    ids = [100] * (tiny.engine.llm.context_length + 1)
    status, answer = _post(tiny, "/v1/completions", {"prompt": ids, "echo": True, "logprobs": 1, "max_tokens": 0})
    assert status == 400 and answer["error"]["code"] == "context_length_exceeded"


def test_vllms_tokenizer_routes(tiny):
    llm = tiny.engine.llm
    status, _, raw = tiny.request("GET", "/tokenizer_info")
    info = json.loads(raw)
    assert status == 200 and info == {"tokenizer_class": "MNN", **llm.tokenizer_info()}
    assert "eos_token" in info and info["model_max_length"] == llm.context_length
    assert info["eos_token"] == "<|im_end|>"  # the export's (llm_config.json's jinja)
    [eos] = llm.tokenize(info["eos_token"])  # lm-eval's eos_token_id: the first id of its text
    assert llm._core.is_stop(eos)
    status, tokenized = _post(tiny, "/tokenize", {"prompt": "Hello world", "add_special_tokens": False})
    ids = llm.tokenize("Hello world")
    assert status == 200 and tokenized == {"count": len(ids), "max_model_len": llm.context_length, "tokens": ids}
    status, text = _post(tiny, "/detokenize", {"tokens": ids})
    assert status == 200 and text == {"content": "Hello world", "prompt": "Hello world"}
    status, refused = _post(tiny, "/tokenize", {"prompt": "x", "add_special_tokens": "yes"})
    assert status == 400 and refused["error"]["param"] == "add_special_tokens"


def test_leaving_stops_the_scoring(tiny):
    """A long prompt scored one forward per token: the client leaves, the scoring ends cancelled (the
    engine's own record), and the model answers the next request."""
    import http.client
    import time

    ended = []
    unsubscribe = tiny.engine.events.subscribe(lambda e: e.kind == "generation" and ended.append(e.state))
    try:
        ids = tiny.engine.llm.tokenize("The lighthouse keeper watched the ships. " * 400)[:2000]
        conn = http.client.HTTPConnection(tiny.host, tiny.port, timeout=60)
        conn.request("POST", "/v1/completions", json.dumps({"prompt": ids, "echo": True, "logprobs": 1,
                                                            "max_tokens": 0}), {"Content-Type": "application/json"})
        deadline = time.monotonic() + 30
        while "running" not in ended:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        conn.close()
        tiny.wait_idle()
        # the engine turns idle, then emits how the generation ended (outside its state lock, so no
        # subscriber runs under it): wait for that event rather than read it the moment the state is idle
        while len(ended) < 2:
            assert time.monotonic() < deadline, f"the scoring's end was not emitted: {ended}"
            time.sleep(0.01)
        assert ended == ["running", "cancelled"]
    finally:
        unsubscribe()
    assert _complete(tiny, prompt="Hi", echo=True, logprobs=1, max_tokens=0)["choices"][0]["text"] == "Hi"
