"""Anthropic's Messages API (``/v1/messages``), driven by the official
``anthropic`` SDK (unpatched; 2.17 here) against a real server on loopback;
every answer and stream event is also parsed strictly with the SDK's own
pydantic types at the server (``tests/anthropic_types.py``, hooked in by
``tests/conftest.py``), with no field the SDK does not know."""

from __future__ import annotations

import json

import anthropic
import pytest
from live_server import KEY, Live, assert_closing_the_stream_cancels, server_fixture
from support import SCRIPTED_TEXT

from mnn_engine.api.anthropic_messages import ANTHROPIC_VERSION

HI = [{"role": "user", "content": "Who are you?"}]
WEATHER = {"name": "get_weather", "description": "Weather in a city",
           "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}


scripted = server_fixture("tiny-scripted", api_key=KEY)
toolcall = server_fixture("tiny-toolcall")
thinking = server_fixture("tiny-thinking")
tiny = server_fixture("tiny")


def _client(live: Live, key: str = KEY, **options) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=live.url, api_key=key, max_retries=0, timeout=60, **options)


def _raw_events(live: Live, body: dict, headers: dict | None = None) -> list[tuple[str, dict]]:
    status, hdrs, raw = live.request("POST", "/v1/messages", json.dumps({**body, "stream": True}),
                                     {"x-api-key": KEY, **(headers or {})})
    assert status == 200 and hdrs["content-type"].startswith("text/event-stream"), raw
    events = []
    for block in raw.decode().strip().split("\n\n"):
        name_line, data_line = block.split("\n")
        name, data = name_line.removeprefix("event: "), json.loads(data_line.removeprefix("data: "))
        assert data["type"] == name  # each checked with the SDK's types at the server (tests/conftest.py)
        events.append((name, data))
    return events


def test_a_message_with_the_sdk_is_the_chat_routes_answer(scripted):
    client = _client(scripted)
    message = client.messages.create(model="tiny-scripted", max_tokens=64, messages=HI, extra_body={"temperature": 0})
    chat = scripted.client.with_options(api_key=KEY).chat.completions.create(
        model="tiny-scripted", messages=HI, max_tokens=64, temperature=0)
    assert message.type == "message" and message.role == "assistant" and message.model == "tiny-scripted"
    assert [b.type for b in message.content] == ["text"]
    assert message.content[0].text == chat.choices[0].message.content == SCRIPTED_TEXT
    assert message.stop_reason == "end_turn" and message.stop_sequence is None
    usage = message.usage
    assert usage.input_tokens + usage.cache_read_input_tokens == chat.usage.prompt_tokens
    assert usage.output_tokens == chat.usage.completion_tokens


def test_the_raw_answer_and_each_event_parse_strictly_as_the_sdks_types(scripted):
    status, _, raw = scripted.request("POST", "/v1/messages", json.dumps(
        {"model": "tiny-scripted", "max_tokens": 64, "messages": HI, "system": [{"type": "text", "text": "Be brief."}],
         "metadata": {"user_id": "u1"}}), {"x-api-key": KEY, "anthropic-version": ANTHROPIC_VERSION})
    assert status == 200 and json.loads(raw)["content"][0]["text"] == SCRIPTED_TEXT
    events = _raw_events(scripted, {"model": "tiny-scripted", "max_tokens": 64, "messages": HI})
    names = [name for name, _ in events]
    assert names[:2] == ["message_start", "ping"] and names[-2:] == ["message_delta", "message_stop"]
    assert names[2:-2] == ["content_block_start", *["content_block_delta"] * (len(names) - 6), "content_block_stop"]
    start = events[0][1]["message"]
    assert start["content"] == [] and start["stop_reason"] is None and start["usage"]["input_tokens"] > 0
    text = "".join(d["delta"]["text"] for n, d in events if n == "content_block_delta")
    assert text == SCRIPTED_TEXT
    assert events[-2][1]["delta"]["stop_reason"] == "end_turn"


def test_streaming_with_the_sdk(scripted):
    with _client(scripted).messages.stream(model="tiny-scripted", max_tokens=64, messages=HI) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == SCRIPTED_TEXT == final.content[0].text
    assert final.stop_reason == "end_turn" and final.usage.output_tokens > 0
    with _client(scripted).messages.stream(model="tiny-scripted", max_tokens=3, messages=HI) as stream:
        final = stream.get_final_message()
    assert final.stop_reason == "max_tokens" and final.usage.output_tokens == 3


def test_stop_sequences_say_which_one_stopped_the_answer(scripted):
    client = _client(scripted)
    message = client.messages.create(model="tiny-scripted", max_tokens=64, messages=HI,
                                     stop_sequences=["zzz", "tiny"])
    assert message.stop_reason == "stop_sequence" and message.stop_sequence == "tiny"
    assert message.content[0].text == SCRIPTED_TEXT[:SCRIPTED_TEXT.index("tiny")]
    events = _raw_events(scripted, {"model": "tiny-scripted", "max_tokens": 64, "messages": HI,
                                    "stop_sequences": ["tiny"]})
    assert events[-2][1]["delta"] == {"stop_reason": "stop_sequence", "stop_sequence": "tiny"}


def test_count_tokens_is_the_prompt_the_answer_counts(scripted):
    client = _client(scripted)
    counted = client.messages.count_tokens(model="tiny-scripted", messages=HI, system="Be brief.")
    message = client.messages.create(model="tiny-scripted", max_tokens=1, messages=HI, system="Be brief.")
    assert counted.input_tokens == message.usage.input_tokens + message.usage.cache_read_input_tokens > 0


def test_the_key_as_x_api_key_or_bearer_and_anthropics_error_shapes(scripted):
    with pytest.raises(anthropic.AuthenticationError) as err:
        _client(scripted, key="wrong").messages.create(model="tiny-scripted", max_tokens=4, messages=HI)
    assert err.value.status_code == 401 and err.value.body["error"]["type"] == "authentication_error"
    bearer = anthropic.Anthropic(base_url=scripted.url, auth_token=KEY, max_retries=0, timeout=60)
    assert bearer.messages.create(model="tiny-scripted", max_tokens=4, messages=HI).usage.output_tokens == 4
    client = _client(scripted)
    with pytest.raises(anthropic.NotFoundError) as err:
        client.messages.create(model="no-such-model", max_tokens=4, messages=HI)
    assert err.value.body["type"] == "error" and err.value.body["error"]["type"] == "not_found_error"
    status, _, raw = scripted.request("POST", "/v1/messages", json.dumps({"model": "tiny-scripted", "messages": HI}),
                                      {"x-api-key": KEY})
    body = json.loads(raw)
    assert status == 400 and body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
    assert "max_tokens" in body["error"]["message"]


@pytest.mark.parametrize(("change", "named"), [
    ({"messages": []}, "messages"),
    ({"messages": [{"role": "system", "content": "x"}]}, "messages[0].role"),
    ({"messages": [{"role": "user", "content": [{"type": "document", "source": {}}]}]}, "messages[0].content[0]"),
    ({"messages": [{"role": "user", "content": [{"type": "tool_use", "id": "a", "name": "b", "input": {}}]}]},
     "messages[0].content[0]"),
    ({"messages": [{"role": "user", "content": [{"type": "image", "source": {"type": "url", "url": "http://x"}}]}]},
     "messages[0].content[0]"),
    ({"tools": [{"type": "web_search_20250305", "name": "web_search"}]}, "tools[0]"),
    ({"tools": [{"name": "t"}]}, "tools[0]"),
    ({"tool_choice": {"type": "sometimes"}}, "tool_choice"),
    ({"thinking": {"type": "enabled", "budget_tokens": 10}}, "thinking"),
    ({"max_tokens": 0}, "max_tokens"),
    ({"stop_sequences": "x"}, "stop_sequences"),
    ({"extra_body": {"temperature": -1}}, "temperature"),
    ({"output_config": {"format": {"type": "json_object"}}}, "output_config"),
    ({"system": [{"type": "image"}]}, "system"),
    ({"stream": "yes"}, "stream"),
])
def test_malformed_requests_are_400s_in_anthropics_shape(scripted, change, named):
    body = {"model": "tiny-scripted", "max_tokens": 8, "messages": HI, **change}
    with pytest.raises(anthropic.BadRequestError) as err:
        _client(scripted).messages.create(**body)
    assert err.value.status_code == 400 and err.value.body["error"]["type"] == "invalid_request_error"
    assert named in err.value.body["error"]["message"], err.value.body


def test_an_image_to_a_text_model_is_a_400(scripted):
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}
    with pytest.raises(anthropic.BadRequestError) as err:
        _client(scripted).messages.create(model="tiny-scripted", max_tokens=4, messages=[
            {"role": "user", "content": [image, {"type": "text", "text": "?"}]}])
    assert "image" in err.value.body["error"]["message"]


def test_a_tool_use_round_trip(toolcall):
    client = _client(toolcall)
    message = client.messages.create(model="tiny-toolcall", max_tokens=64, messages=HI, tools=[WEATHER])
    assert message.stop_reason == "tool_use"
    use = next(b for b in message.content if b.type == "tool_use")
    assert use.name == "get_weather" and use.input == {"city": "Paris"} and use.id.startswith("toolu_")
    follow = [*HI, {"role": "assistant", "content": [b.model_dump(exclude_unset=True) for b in message.content]},
              {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "Sunny, 21 C"}]}]
    answer = client.messages.create(model="tiny-toolcall", max_tokens=64, messages=follow, tools=[WEATHER])
    assert answer.usage.input_tokens + answer.usage.cache_read_input_tokens > \
        message.usage.input_tokens + message.usage.cache_read_input_tokens
    with client.messages.stream(model="tiny-toolcall", max_tokens=64, messages=HI, tools=[WEATHER],
                                tool_choice={"type": "any"}) as stream:
        final = stream.get_final_message()
    streamed = next(b for b in final.content if b.type == "tool_use")
    assert (streamed.name, streamed.input, final.stop_reason) == ("get_weather", {"city": "Paris"}, "tool_use")
    events = _raw_events(toolcall, {"model": "tiny-toolcall", "max_tokens": 64, "messages": HI, "tools": [WEATHER]})
    assert any(n == "content_block_delta" and d["delta"]["type"] == "input_json_delta" for n, d in events)


def test_thinking_blocks_on_the_thinking_model(thinking):
    client = _client(thinking)
    message = client.messages.create(model="tiny-thinking", max_tokens=2048, messages=HI,
                                     thinking={"type": "enabled", "budget_tokens": 1024})
    assert [b.type for b in message.content] == ["thinking", "text"]
    assert message.content[0].thinking == "The user greets me." and message.content[1].text == "Hello there!"
    with client.messages.stream(model="tiny-thinking", max_tokens=2048, messages=HI,
                                thinking={"type": "enabled", "budget_tokens": 1024}) as stream:
        kinds = [event.delta.type for event in stream if event.type == "content_block_delta"]
        final = stream.get_final_message()
    assert "thinking_delta" in kinds and "text_delta" in kinds
    assert final.content[0].thinking == "The user greets me."
    off = client.messages.create(model="tiny-thinking", max_tokens=64, messages=HI, thinking={"type": "disabled"})
    assert off.usage.input_tokens + off.usage.cache_read_input_tokens > \
        message.usage.input_tokens + message.usage.cache_read_input_tokens  # the template's empty think block


def test_output_config_format_is_structured_output(tiny):
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"],
              "additionalProperties": False}
    message = _client(tiny).messages.create(model="tiny", max_tokens=64, messages=HI, extra_body={"seed": 3},
                                            output_config={"format": {"type": "json_schema", "schema": schema}})
    assert set(json.loads(message.content[0].text)) == {"ok"}


def test_closing_the_stream_stops_the_generation(tiny):
    assert_closing_the_stream_cancels(tiny, "/v1/messages", {"model": "tiny", "max_tokens": 100000, "messages": HI},
                                      b"message_start")


def test_the_model_list_in_anthropics_shape_for_its_sdk(scripted):
    client = _client(scripted)
    page = client.models.list()
    assert [m.id for m in page.data] == ["tiny-scripted"] and page.data[0].type == "model"
    assert page.data[0].max_input_tokens > 0
    assert client.models.retrieve("tiny-scripted").id == "tiny-scripted"
    with pytest.raises(anthropic.NotFoundError) as err:
        client.models.retrieve("no-such-model")
    assert err.value.body["error"]["type"] == "not_found_error"
    # OpenAI's clients (no anthropic-version) still get OpenAI's list
    assert scripted.client.with_options(api_key=KEY).models.list().data[0].id == "tiny-scripted"
