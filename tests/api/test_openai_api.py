"""Request parsing and output splitting of the OpenAI translation layer (pure Python)."""

from __future__ import annotations

import base64
import itertools
import json
import os
import stat

import pytest
from hypothesis import given
from hypothesis import strategies as st
from media_samples import bmp, png

from mnn_engine import MnnEngineError
from mnn_engine.api.openai_chat import (
    MediaPolicy,
    OutputParser,
    delta_dict,
    message_from,
    parse_chat_request,
    parse_tool_call,
    prompt_opens_thinking,
)

USER = [{"role": "user", "content": "hi"}]
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}},
         {"type": "function", "function": {"name": "get_time"}}]
PNG = base64.b64encode(png(4, 4)).decode()  # a real one: the header is checked before MNN sees it


def parse(**body):
    return parse_chat_request({"messages": USER, **body})


def code_and_param(body, images=None):
    with pytest.raises(MnnEngineError) as err:
        parse_chat_request(body, images)
    return err.value.code, err.value.param


# ---------------------------------------------------------------- options
def test_max_tokens_aliases_and_precedence():
    assert parse(max_tokens=5).sampling["max_tokens"] == 5
    assert parse(max_completion_tokens=6).sampling["max_tokens"] == 6
    assert parse(n_predict=7).sampling["max_tokens"] == 7
    assert parse(max_tokens=5, max_completion_tokens=6, n_predict=7).sampling["max_tokens"] == 6
    assert parse(max_tokens=-1).sampling["max_tokens"] == -1
    assert "max_tokens" not in parse().sampling


def test_sampling_fields_pass_through_and_unknown_fields_are_ignored():
    request = parse(temperature=0.5, top_p=0.9, top_k=20, min_p=0.1, presence_penalty=1, frequency_penalty=0.5,
                    repetition_penalty=1.1, seed=3, stop=["x"], logit_bias={"42": -100}, user="u", metadata={},
                    model="whatever", parallel_tool_calls=True)
    assert request.sampling == {"temperature": 0.5, "top_p": 0.9, "top_k": 20, "min_p": 0.1, "presence_penalty": 1,
                                "frequency_penalty": 0.5, "repetition_penalty": 1.1, "seed": 3,
                                "logit_bias": {"42": -100}, "stop": ["x"]}


def test_ignore_eos_extension():
    assert parse(ignore_eos=True).sampling["ignore_eos"] is True
    assert code_and_param({"messages": USER, "ignore_eos": "yes"}) == ("invalid_argument", "ignore_eos")


def test_stream_usage_logprobs_thinking():
    request = parse(stream=True, stream_options={"include_usage": True}, logprobs=True, top_logprobs=2)
    assert request.stream and request.include_usage
    assert request.sampling["logprobs"] is True and request.sampling["top_logprobs"] == 2
    assert parse(chat_template_kwargs={"enable_thinking": False}).enable_thinking is False
    assert parse(reasoning_effort="none").enable_thinking is False
    assert parse(reasoning_effort="high").enable_thinking is True
    assert parse().enable_thinking is None


@pytest.mark.parametrize(("body", "param"), [
    ([1, 2], "body"),
    ({}, "messages"),
    ({"messages": []}, "messages"),
    ({"messages": "hi"}, "messages"),
    ({"messages": [{"role": "robot", "content": "x"}]}, "messages[0].role"),
    ({"messages": [{"role": "user", "content": 5}]}, "messages[0].content"),
    ({"messages": [{"role": "user", "content": [{"type": "audio"}]}]}, "messages[0].content[0]"),
    ({"messages": USER, "n": 2}, "n"),
    ({"messages": USER, "max_tokens": "10"}, "max_tokens"),
    ({"messages": USER, "max_tokens": True}, "max_tokens"),
    ({"messages": USER, "stream": "yes"}, "stream"),
    ({"messages": USER, "stream_options": []}, "stream_options"),
    ({"messages": USER, "top_logprobs": 3}, "top_logprobs"),
    ({"messages": USER, "reasoning_effort": "extreme"}, "reasoning_effort"),
    ({"messages": USER, "chat_template_kwargs": {"enable_thinking": "no"}}, "chat_template_kwargs.enable_thinking"),
    ({"messages": USER, "tools": {"a": 1}}, "tools"),
    ({"messages": USER, "tools": [{"type": "function", "function": {}}]}, "tools[0].function.name"),
    ({"messages": USER, "tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "x"}}},
     "tool_choice"),
    ({"messages": USER, "tool_choice": "required"}, "tool_choice"),
    ({"messages": USER, "response_format": "json"}, "response_format"),
])
def test_bad_requests_name_the_parameter(body, param):
    assert code_and_param(body) == ("invalid_argument", param)


# ---------------------------------------------------------------- messages
def test_roles_and_content_parts():
    request = parse_chat_request({"messages": [
        {"role": "developer", "content": "be brief"},
        {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "get_time", "arguments": "{\"tz\": \"UTC\"}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "12:00"},
    ]})
    assert list(request.messages) == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "ab"},
        {"role": "assistant", "content": '<tool_call>{"name": "get_time", "arguments": {"tz": "UTC"}}</tool_call>'},
        {"role": "tool", "content": "12:00"},
    ]


def test_tools_and_tool_choice():
    assert parse(tools=TOOLS).tools == TOOLS and parse(tools=TOOLS).parse_tools
    none = parse(tools=TOOLS, tool_choice="none")
    assert none.tools is None and not none.parse_tools
    named = parse(tools=TOOLS, tool_choice={"type": "function", "function": {"name": "get_time"}})
    assert [t["function"]["name"] for t in named.tools] == ["get_time"]


# ---------------------------------------------------------------- images
def _image_body(url: str) -> dict:
    return {"messages": [{"role": "user", "content": [
        {"type": "text", "text": "What is this? "}, {"type": "image_url", "image_url": {"url": url}}]}]}


def test_text_only_model_rejects_images():
    code, param = code_and_param(_image_body(f"data:image/png;base64,{PNG}"))
    assert (code, param) == ("invalid_argument", "messages[0].content[1]")


def test_images_become_private_files_and_img_tags():
    request = parse_chat_request(_image_body(f"data:image/png;base64,{PNG}"), MediaPolicy(model_is_visual=True))
    [path] = request.media_files
    assert request.messages[0]["content"] == f"What is this? <img>{path}</img>"
    # MNN is given the pixels as a plain BMP, never the client's bytes (runtime/image_decode.py)
    assert path.read_bytes().startswith(b"BM") and path.suffix == ".bmp"
    assert _pixels(path.read_bytes()) == _pixels(base64.b64decode(PNG))
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(os.stat(path.parent).st_mode) == 0o700
    request.cleanup()
    assert not path.exists() and not path.parent.exists()


@pytest.mark.parametrize("url", [
    "https://example.com/cat.png",
    "data:text/plain;base64,aGk=",
    "data:image/png,rawdata",
    "data:image/png;base64,***",
    "data:image/png;base64,",
    "file:///etc/hostname",
])
def test_bad_image_urls(url):
    assert code_and_param(_image_body(url), MediaPolicy(model_is_visual=True))[0] == "invalid_argument"


def test_image_size_limit_and_file_urls(tmp_path):
    big = base64.b64encode(b"x" * 2000).decode()
    policy = MediaPolicy(model_is_visual=True, max_image_bytes=1000)
    assert code_and_param(_image_body(f"data:image/png;base64,{big}"), policy)[0] == "invalid_argument"
    image = tmp_path / "cat.bmp"
    image.write_bytes(bmp(4, 4))
    allowed = parse_chat_request(_image_body(image.as_uri()), MediaPolicy(model_is_visual=True, allow_file_urls=True))
    assert _pixels(allowed.media_files[0].read_bytes()) == _pixels(image.read_bytes())
    allowed.cleanup()


def _pixels(data: bytes) -> bytes:
    import io

    from PIL import Image

    with Image.open(io.BytesIO(data)) as image:
        return image.convert("RGB").tobytes()


# ---------------------------------------------------------------- output parsing
def run(parser: OutputParser, pieces: list[str]):
    deltas = []
    for piece in pieces:
        deltas += parser.feed(piece)
    return deltas + parser.finish()


def test_reasoning_then_content():
    message = message_from(run(OutputParser(), ["<think>", "let me", " think", "</think>", "\n\n", "Answer."]))
    assert message == {"role": "assistant", "content": "Answer.", "reasoning_content": "let me think",
                       "refusal": None}


def test_reasoning_opened_by_the_template():
    assert prompt_opens_thinking("<|im_start|>assistant\n<think>\n")
    assert not prompt_opens_thinking("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    message = message_from(run(OutputParser(in_reasoning=True), ["hmm", "</thi", "nk>ok"]))
    assert message == {"role": "assistant", "content": "ok", "reasoning_content": "hmm", "refusal": None}


def test_think_tag_later_in_the_answer_is_content():
    message = message_from(run(OutputParser(), ["Use <think>", " tags"]))
    assert message["content"] == "Use <think> tags" and "reasoning_content" not in message


def test_tool_calls_are_parsed():
    parser = OutputParser(parse_tools=True)
    deltas = run(parser, ["Checking. <tool", '_call>{"name": "get_weather", "arguments": {"city": "Paris"}}',
                          "</tool_call>"])
    message = message_from(deltas)
    assert message["content"] == "Checking. "
    [call] = message["tool_calls"]
    assert call["type"] == "function" and call["id"].startswith("call_")
    assert call["function"] == {"name": "get_weather", "arguments": '{"city": "Paris"}'}
    assert parser.tool_calls[0]["index"] == 0


def test_a_malformed_tool_call_is_content_and_a_cut_one_a_partial_call():
    bad = message_from(run(OutputParser(parse_tools=True), ["<tool_call>{not json}</tool_call>"]))
    assert bad == {"role": "assistant", "content": "<tool_call>{not json}</tool_call>", "refusal": None}
    # cut by max_tokens: OpenAI returns the call with the arguments generated so far, never the markup
    cut = message_from(run(OutputParser(parse_tools=True),
                           ['Sure.<tool_call>\n{"name": "Person", "arguments": {"name": "Al']))
    assert cut["content"] == "Sure." and "<tool_call>" not in json.dumps(cut)
    [call] = cut["tool_calls"]
    assert call["function"] == {"name": "Person", "arguments": '{"name": "Al'} and call["id"].startswith("call_")
    early = message_from(run(OutputParser(parse_tools=True), ['<tool_call>{"name": "Per']))
    assert early["content"] is None and early["tool_calls"][0]["function"] == {"name": "", "arguments": ""}
    assert parse_tool_call('{"arguments": {}}') is None
    assert parse_tool_call("[1]") is None


def test_tool_tags_are_text_when_no_tools_were_given():
    message = message_from(run(OutputParser(), ['<tool_call>{"name": "x"}</tool_call>']))
    assert message["content"] == '<tool_call>{"name": "x"}</tool_call>'


SAMPLES = [
    "<think>plan it</think>\n\nThe answer is 42.",
    'Sure.<tool_call>{"name": "f", "arguments": {"a": [1, 2]}}</tool_call>',
    "<think>a</think>b<tool_call>oops</tool_call>c <think> d",
    "plain text with < and </ and <tool_ in it",
]


@given(sample=st.sampled_from(SAMPLES), cuts=st.lists(st.integers(min_value=0, max_value=80), max_size=12))
def test_splitting_never_changes_the_result(sample, cuts):
    whole = message_from(run(OutputParser(parse_tools=True), [sample]))
    bounds = sorted({c % (len(sample) + 1) for c in cuts} | {0, len(sample)})
    pieces = [sample[a:b] for a, b in itertools.pairwise(bounds)]
    split = message_from(run(OutputParser(parse_tools=True), pieces))
    for message in (whole, split):
        for call in message.get("tool_calls", []):
            call["id"] = "call"
    assert split == whole


TOOL_SAMPLES = [
    'Sure.<tool_call>{"name": "f", "arguments": {"a": [1, 2]}}</tool_call>',
    '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Zürich", "at": {"h": 1}}}\n</tool_call>'
    '<tool_call>{"name":"clock","arguments":{}}</tool_call>',
    '<tool_call>{"name": "f", "arguments": "{\\"a\\": 1}"}</tool_call>',  # arguments as a string: sent whole
    '<tool_call>{"name": "Person", "arguments": {"name": "Al", "age": 3',  # cut off by max_tokens
]


def streamed_message(deltas) -> dict:
    """What a streaming client rebuilds (the SDK's accumulator: calls by index, arguments joined)."""
    content = "".join(d.text for d in deltas if d.kind == "content")
    calls: dict[int, dict] = {}
    for delta in deltas:
        if delta.kind in ("tool_call", "tool_call_arguments"):
            piece = delta_dict(delta)["tool_calls"][0]
            call = calls.setdefault(piece["index"], {"id": piece.get("id"), "type": piece.get("type"),
                                                     "function": {"name": "", "arguments": ""}})
            call["function"]["name"] += piece["function"].get("name", "")
            call["function"]["arguments"] += piece["function"].get("arguments", "")
    return {"content": content or None, "tool_calls": [calls[i] for i in sorted(calls)]}


@given(sample=st.sampled_from(TOOL_SAMPLES), cuts=st.lists(st.integers(min_value=0, max_value=160), max_size=20))
def test_a_streamed_tool_call_joins_to_the_whole_one(sample, cuts):
    whole = message_from(run(OutputParser(parse_tools=True), [sample]))
    bounds = sorted({c % (len(sample) + 1) for c in cuts} | {0, len(sample)})
    pieces = [sample[a:b] for a, b in itertools.pairwise(bounds)]
    deltas = run(OutputParser(parse_tools=True, stream_arguments=True), pieces)
    streamed = streamed_message(deltas)
    assert [c["function"] for c in streamed["tool_calls"]] == [c["function"] for c in whole.get("tool_calls", [])]
    assert (streamed["content"] or None) == (whole["content"] or None)
    assert all(c["id"].startswith("call_") and c["type"] == "function" for c in streamed["tool_calls"])


def test_a_tool_call_streams_its_name_first_then_argument_pieces():
    sample = '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}</tool_call>'
    deltas = run(OutputParser(parse_tools=True, stream_arguments=True), list(sample))  # a character a token
    first, *rest = [delta_dict(d)["tool_calls"][0] for d in deltas]
    assert first == {"index": 0, "id": first["id"], "type": "function",
                     "function": {"name": "get_weather", "arguments": ""}}
    assert len(rest) > 10 and all(set(p) == {"index", "function"} and set(p["function"]) == {"arguments"}
                                  for p in rest)
    assert "".join(p["function"]["arguments"] for p in rest) == '{"city": "Paris", "days": 3}'


def test_a_streamed_call_that_turns_malformed_stays_a_call_with_its_arguments_object():
    # what was sent cannot be taken back: the call keeps its name and the arguments object, the junk goes
    for sample in ('<tool_call>{"name": "f", "arguments": {"a": 1}} trailing</tool_call>',
                   '<tool_call>{"name": "f", "arguments": {"a": 1} trailing junk</tool_call>'):
        streamed = streamed_message(run(OutputParser(parse_tools=True, stream_arguments=True), list(sample)))
        assert [c["function"] for c in streamed["tool_calls"]] == [{"name": "f", "arguments": '{"a": 1}'}]
        assert streamed["content"] is None


@given(st.text(max_size=200))
def test_any_text_survives(text):
    message = message_from(run(OutputParser(parse_tools=True), [text]))
    rebuilt = (message.get("content") or "") + message.get("reasoning_content", "")
    for call in message.get("tool_calls", []):
        json.loads(call["function"]["arguments"])
    assert set(rebuilt) <= set(text)
