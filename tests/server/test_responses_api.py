"""OpenAI's Responses API (``/v1/responses``), driven by the official
``openai`` SDK (unpatched) and the OpenAI Agents SDK with its default
(Responses) model, against a real server on loopback; every answer and
stream event is checked at the server against OpenAI's own schemas
(``Response``, ``ResponseStreamEvent``, ``ResponseItemList``:
tests/openai_schemas.py, hooked in by tests/conftest.py)."""

from __future__ import annotations

import asyncio
import json

import openai
import pydantic
import pytest
from live_server import KEY, Live, assert_closing_the_stream_cancels, server_fixture
from support import SCRIPTED_TEXT

HI = "Who are you?"
WEATHER = {"type": "function", "name": "get_weather", "description": "Weather in a city",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}


scripted = server_fixture("tiny-scripted", api_key=KEY)
toolcall = server_fixture("tiny-toolcall")
thinking = server_fixture("tiny-thinking")
tiny = server_fixture("tiny")


def _client(live: Live, key: str = KEY) -> openai.OpenAI:
    return openai.OpenAI(base_url=live.url + "/v1", api_key=key, max_retries=0, timeout=60)


def test_a_response_is_the_chat_routes_answer(scripted):
    client = _client(scripted)
    answer = client.responses.create(model="tiny-scripted", input=HI, max_output_tokens=64)
    chat = client.chat.completions.create(model="tiny-scripted", messages=[{"role": "user", "content": HI}],
                                          max_tokens=64)
    assert answer.object == "response" and answer.status == "completed" and answer.model == "tiny-scripted"
    assert answer.output_text == chat.choices[0].message.content == SCRIPTED_TEXT
    assert [item.type for item in answer.output] == ["message"]
    assert answer.usage.input_tokens == chat.usage.prompt_tokens
    assert answer.usage.output_tokens == chat.usage.completion_tokens
    cut = client.responses.create(model="tiny-scripted", input=HI, max_output_tokens=3)
    assert cut.status == "incomplete" and cut.incomplete_details.reason == "max_output_tokens"


def test_streaming_with_the_sdk_and_the_documented_event_order(scripted):
    client = _client(scripted)
    with client.responses.stream(model="tiny-scripted", input=HI, max_output_tokens=64) as stream:
        events = list(stream)
        final = stream.get_final_response()
    names = [e.type for e in events]
    assert names[:2] == ["response.created", "response.in_progress"]
    assert names[2:4] == ["response.output_item.added", "response.content_part.added"]
    assert names[-4:] == ["response.output_text.done", "response.content_part.done", "response.output_item.done",
                          "response.completed"]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == SCRIPTED_TEXT
    assert final.output_text == SCRIPTED_TEXT and final.status == "completed"


def test_previous_response_id_continues_from_the_prompt_cache(scripted):
    client = _client(scripted)
    first = client.responses.create(model="tiny-scripted", input=HI, max_output_tokens=64,
                                    instructions="Be brief.")
    # instructions are not carried over (as OpenAI's): the next turn gives them again
    second = client.responses.create(model="tiny-scripted", input="And again?", previous_response_id=first.id,
                                     max_output_tokens=8, instructions="Be brief.")
    assert second.usage.input_tokens > first.usage.input_tokens + first.usage.output_tokens
    if scripted.engine.llm.batch_exact:  # the stored turn renders to the prompt the first held: the cache
        # serves it whole (an engine whose rows are not batch-exact reuses 64-token blocks only: PyPI's MNN)
        assert second.usage.input_tokens_details.cached_tokens >= first.usage.input_tokens
    resent = client.responses.create(model="tiny-scripted", max_output_tokens=8, instructions="Be brief.", input=[
        {"role": "user", "content": HI}, {"role": "assistant", "content": first.output_text},
        {"role": "user", "content": "And again?"}], store=False)
    assert resent.usage.input_tokens == second.usage.input_tokens  # the same prompt, sent whole
    assert client.responses.retrieve(first.id).output_text == first.output_text
    items = client.responses.input_items.list(first.id)
    assert [i.type for i in items.data] == ["message"] and items.data[0].content[0].text == HI
    client.responses.delete(first.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(first.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.create(model="tiny-scripted", input="?", previous_response_id=first.id)


def test_a_function_call_round_trip(toolcall):
    client = _client(toolcall)
    answer = client.responses.create(model="tiny-toolcall", input=HI, tools=[WEATHER])
    call = next(item for item in answer.output if item.type == "function_call")
    assert call.name == "get_weather" and json.loads(call.arguments) == {"city": "Paris"}
    follow = client.responses.create(model="tiny-toolcall", previous_response_id=answer.id, tools=[WEATHER],
                                     input=[{"type": "function_call_output", "call_id": call.call_id,
                                             "output": "Sunny, 21 C"}])
    assert follow.status == "completed" and follow.usage.input_tokens > answer.usage.input_tokens
    with client.responses.stream(model="tiny-toolcall", input=HI, tools=[WEATHER], tool_choice="required") as stream:
        kinds = [e.type for e in stream]
        final = stream.get_final_response()
    assert "response.function_call_arguments.delta" in kinds and "response.function_call_arguments.done" in kinds
    streamed = next(item for item in final.output if item.type == "function_call")
    assert json.loads(streamed.arguments) == {"city": "Paris"}


def test_logprobs_are_the_chat_routes_whole_and_streamed(scripted):
    client = _client(scripted)
    include = ["message.output_text.logprobs"]
    answer = client.responses.create(model="tiny-scripted", input=HI, max_output_tokens=64, include=include,
                                     top_logprobs=2)
    chat = client.chat.completions.create(model="tiny-scripted", messages=[{"role": "user", "content": HI}],
                                          max_tokens=64, logprobs=True, top_logprobs=2)
    assert answer.top_logprobs == 2
    got = answer.output[0].content[0].logprobs
    assert [(e.token, e.logprob, [t.token for t in e.top_logprobs]) for e in got] == [
        (e.token, e.logprob, [t.token for t in e.top_logprobs]) for e in chat.choices[0].logprobs.content]
    assert b"".join(bytes(e.bytes) for e in got).decode() == SCRIPTED_TEXT
    assert all(len(e.top_logprobs) == 2 for e in got)
    with client.responses.stream(model="tiny-scripted", input=HI, max_output_tokens=64, include=include) as stream:
        events = list(stream)
        final = stream.get_final_response()
    done = next(e for e in events if e.type == "response.output_text.done")
    assert [e.logprob for e in done.logprobs] == [e.logprob for e in got]  # the same greedy run
    assert [e.model_dump() for e in final.output[0].content[0].logprobs] == [e.model_dump() for e in done.logprobs]
    assert all(e.logprobs == [] for e in events if e.type == "response.output_text.delta")  # not known yet
    plain = client.responses.create(model="tiny-scripted", input=HI, max_output_tokens=64)
    assert plain.output[0].content[0].logprobs == [] and plain.top_logprobs is None


def test_a_messages_logprobs_are_its_own_tokens_not_the_reasoning(thinking):
    answer = _client(thinking).responses.create(model="tiny-thinking", input=HI, include=[
        "message.output_text.logprobs"])
    tokens = "".join(e.token for e in answer.output[1].content[0].logprobs)
    assert "Hello there!" in tokens and "greets" not in tokens and "think>" not in tokens


def test_text_format_parses_into_a_model(tiny):
    class Answer(pydantic.BaseModel):
        ok: bool

    parsed = _client(tiny).responses.parse(model="tiny", input=HI, text_format=Answer, max_output_tokens=64,
                                           extra_body={"seed": 3})
    assert isinstance(parsed.output_parsed, Answer)


def test_reasoning_items_on_the_thinking_model(thinking):
    client = _client(thinking)
    answer = client.responses.create(model="tiny-thinking", input=HI, reasoning={"effort": "medium"})
    assert [item.type for item in answer.output] == ["reasoning", "message"]
    assert answer.output[0].content[0].text == "The user greets me." and answer.output_text == "Hello there!"
    off = client.responses.create(model="tiny-thinking", input=HI, reasoning={"effort": "none"})
    assert off.usage.input_tokens > answer.usage.input_tokens  # the template's empty think block
    with client.responses.stream(model="tiny-thinking", input=HI) as stream:
        kinds = [e.type for e in stream]
    assert "response.reasoning_text.delta" in kinds and "response.output_text.delta" in kinds


def test_an_agent_with_a_function_tool_runs_to_completion(toolcall):
    agents = pytest.importorskip("agents")
    seen = []

    @agents.function_tool
    def get_weather(city: str) -> str:
        """Weather in a city."""
        seen.append(city)
        return f"Sunny in {city}"

    client = openai.AsyncOpenAI(base_url=toolcall.url + "/v1", api_key="none", max_retries=0, timeout=60)
    agents.set_tracing_disabled(True)
    model = agents.OpenAIResponsesModel(model="tiny-toolcall", openai_client=client)  # the SDK's default model
    agent = agents.Agent(name="weather", instructions="Answer with the weather.", tools=[get_weather], model=model,
                         tool_use_behavior="stop_on_first_tool")  # the test model calls its tool whatever it is told
    async def run():
        try:
            return await agents.Runner.run(agent, HI)
        finally:
            await client.close()  # in the loop: closed after it, httpx's close fails and asyncio logs it

    result = asyncio.run(run())
    assert seen == ["Paris"] and result.final_output == "Sunny in Paris"


@pytest.mark.parametrize(("change", "named"), [
    ({"input": []}, "input"),
    ({"input": [{}]}, "input[0]"),  # found by the OpenAPI fuzzer: a KeyError (500) before
    ({"input": [{"type": "message", "role": "tool", "content": "x"}]}, "input[0].role"),
    ({"input": [{"type": "item_reference", "id": "x"}]}, "input[0]"),
    ({"input": [{"role": "user", "content": [{"type": "input_file", "file_id": "f"}]}]}, "input[0].content[0]"),
    ({"input": [{"type": "function_call", "call_id": 1}]}, "input[0]"),
    ({"tools": [{"type": "web_search"}]}, "tools[0]"),
    ({"tools": [{"type": "code_interpreter", "container": {"type": "auto"}}]}, "tools[0]"),
    ({"tools": [{"type": "function"}]}, "tools[0]"),
    ({"tool_choice": {"type": "mcp"}}, "tool_choice"),
    ({"text": {"format": {"type": "xml"}}}, "text.format"),
    ({"include": ["everything"]}, "include"),
    ({"include": ["message.output_text.logprobs"], "top_logprobs": 21}, "top_logprobs"),
    ({"metadata": {"k": 1}}, "metadata"),
    ({"store": "yes"}, "store"),
    ({"max_output_tokens": "many"}, "max_tokens"),
    ({"temperature": 3}, "temperature"),  # found by the OpenAPI fuzzer: echoed, outside OpenAI's 0..2
    ({"top_p": 1.5}, "top_p"),
    ({"previous_response_id": 7}, "previous_response_id"),
])
def test_malformed_requests_are_400s_naming_the_field(scripted, change, named):
    with pytest.raises(openai.BadRequestError) as err:
        _client(scripted).responses.create(**{"model": "tiny-scripted", "input": HI, **change})
    assert named in err.value.body["message"], err.value.body


def test_unknown_ids_and_images_to_a_text_model(scripted):
    client = _client(scripted)
    with pytest.raises(openai.NotFoundError) as err:
        client.responses.retrieve("resp_nope")
    assert err.value.body["code"] == "response_not_found"
    with pytest.raises(openai.BadRequestError) as err:
        client.responses.create(model="tiny-scripted", input=[{"role": "user", "content": [
            {"type": "input_image", "image_url": "data:image/png;base64,iVBORw0KGgo="}]}])
    assert "image" in err.value.body["message"]
    with pytest.raises(openai.AuthenticationError):
        _client(scripted, key="wrong").responses.create(model="tiny-scripted", input=HI)


def test_store_false_keeps_nothing(scripted):
    client = _client(scripted)
    kept = client.responses.create(model="tiny-scripted", input=HI, max_output_tokens=2, store=False)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(kept.id)


def test_the_store_is_bounded_by_count_and_bytes():
    from mnn_engine.api.response_store import ResponseStore
    from mnn_engine.errors import MnnEngineError

    store = ResponseStore(max_count=3, max_bytes=4000)
    for n in range(5):
        store.put({"id": f"r{n}"}, [], [{"text": "x" * 1000}])
    assert len(store) == 3 and store.get("r4") and store.get("r2")
    with pytest.raises(MnnEngineError) as err:
        store.get("r1")  # the oldest went first
    assert err.value.code == "response_not_found"
    store.put({"id": "big"}, [], [{"text": "x" * 3000}])  # with it the bytes pass 4000: the others go
    assert store.get("big") and len(store) == 1
    store.put({"id": "huge"}, [], [{"text": "x" * 5000}])  # larger than the whole store: not kept
    with pytest.raises(MnnEngineError):
        store.get("huge")
    assert store.get("big")


def test_closing_the_stream_stops_the_generation(tiny):
    assert_closing_the_stream_cancels(tiny, "/v1/responses", {"model": "tiny", "input": HI, "ignore_eos": True,
                                                               "max_output_tokens": 100000}, b"response.created")


def test_a_huge_tool_list_is_a_400_on_both_agent_routes(scripted):
    """5,000 tools (each a valid function) make a prompt far past the context: a 400 in each dialect's
    shape, and the server answers the next request."""
    import anthropic

    tools = [{**WEATHER, "name": f"tool_{n}"} for n in range(5000)]
    with pytest.raises(openai.BadRequestError) as err:
        _client(scripted).responses.create(model="tiny-scripted", input=HI, tools=tools)
    assert err.value.body["code"] == "context_length_exceeded"
    with pytest.raises(anthropic.BadRequestError) as err:
        anthropic.Anthropic(base_url=scripted.url, api_key=KEY, max_retries=0, timeout=60).messages.create(
            model="tiny-scripted", max_tokens=4, messages=[{"role": "user", "content": HI}],
            tools=[{"name": t["name"], "input_schema": t["parameters"]} for t in tools])
    assert err.value.body["error"]["type"] == "invalid_request_error"
    assert err.value.body["error"]["code"] == "context_length_exceeded"
    assert _client(scripted).responses.create(model="tiny-scripted", input=HI, max_output_tokens=2).status


def test_a_conversation_may_continue_on_another_served_model(tmp_path):
    """A stored conversation is text: another served model continues it (its own prompt cache misses)."""
    from support import test_model_dir

    from mnn_engine import ModelPool, ModelStore

    store = ModelStore(tmp_path)
    store.import_model(test_model_dir("tiny-scripted"), model_id="first")
    store.import_model(test_model_dir("tiny"), model_id="second")
    pool = ModelPool(store=store, defaults={"threads": 1})
    url = pool.start_server(port=0)
    try:
        client = openai.OpenAI(base_url=url + "/v1", api_key="none", max_retries=0, timeout=60)
        first = client.responses.create(model="first", input=HI, max_output_tokens=64)
        second = client.responses.create(model="second", input="More?", previous_response_id=first.id,
                                         max_output_tokens=4)
        assert second.model == "second" and second.usage.input_tokens > first.usage.input_tokens
        assert second.usage.input_tokens_details.cached_tokens == 0
    finally:
        pool.close()


@pytest.mark.parametrize(("path", "payload", "error_event"), [
    ("/v1/responses", {"input": HI, "max_output_tokens": 64}, "event: error"),
    ("/v1/messages", {"model": "tiny-scripted", "max_tokens": 64, "messages": [{"role": "user", "content": HI}]},
     "event: error"),
])
def test_a_failure_after_the_stream_started_is_the_dialects_error_event(tmp_path, path, payload, error_event):
    live = Live(tmp_path, "tiny-scripted")
    try:
        live.engine.llm._inject_failure(4)  # after four tokens: the stream has started
        status, _, raw = live.request("POST", path, json.dumps({**payload, "stream": True}))
        assert status == 200
        text = raw.decode()
        last = text.strip().split("\n\n")[-1]
        assert last.startswith(error_event) and "generation_failed" in last, text[-600:]
        assert "response.completed" not in text and "message_stop" not in text
    finally:
        live.close()
