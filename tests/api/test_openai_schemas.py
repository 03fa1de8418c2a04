"""The vendored OpenAI schemas bite: what the server answered before issue 26 fails them."""

from __future__ import annotations

from openai_schemas import DOCUMENT, check

ANSWER = {"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "m",
          "choices": [{"index": 0, "finish_reason": "stop", "logprobs": None,
                       "message": {"role": "assistant", "content": "hi", "refusal": None}}]}


def test_the_schemas_name_their_source():
    assert DOCUMENT["commit"] and "openai/openai-openapi" in DOCUMENT["source"] and DOCUMENT["license"]


def test_a_chat_answer_fits_and_one_without_refusal_does_not():
    assert check("/v1/chat/completions", 200, ANSWER) == []
    message = {"role": "assistant", "content": "hi"}
    old = {**ANSWER, "choices": [{**ANSWER["choices"][0], "message": message}]}
    assert any("refusal" in problem for problem in check("/v1/chat/completions", 200, old))


def test_logprobs_need_refusal_and_errors_their_shape():
    logprobs = {"content": [{"token": "a", "logprob": -0.1, "bytes": [97], "top_logprobs": []}]}
    old = {**ANSWER, "choices": [{**ANSWER["choices"][0], "logprobs": logprobs}]}
    assert check("/v1/chat/completions", 200, old)
    assert check("/v1/chat/completions", 200, {**old, "choices": [{**old["choices"][0],
                                                                    "logprobs": {**logprobs, "refusal": None}}]}) == []
    assert check("/v1/models", 401, {"error": {"message": "no", "type": "x", "param": None, "code": "c"}}) == []
    assert check("/v1/models", 401, {"error": "no"})
