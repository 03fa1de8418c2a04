"""Structured output: JSON mode, JSON Schema, grammars and enforced tool
calls, through the native loop's token mask. The random-weight model samples
at temperature 1, so only the grammar keeps its output valid."""

from __future__ import annotations

import json
import subprocess
import sys

import jsonschema
import pydantic
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from live_server import server_fixture
from support import test_model_dir

from mnn_engine import MnnEngineError
from mnn_engine.runtime import structured

CHAT = [{"role": "user", "content": "Describe a person."}]
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12},
                                                    "unit": {"enum": ["C", "F"]}},
                   "required": ["city", "unit"], "additionalProperties": False}}}
CLOCK = {"type": "function", "function": {
    "name": "get_time", "parameters": {"type": "object", "properties": {"zone": {"type": "integer", "minimum": -12,
                                                                                  "maximum": 14}},
                                       "required": ["zone"], "additionalProperties": False}}}


# ---------------------------------------------------------------- schemas hypothesis draws
#: enum strings without control characters (refused: see test_refusals_name_what_is_not_supported)
PRINTABLE = st.characters(blacklist_categories=("Cc", "Cs"))


def _leaf() -> st.SearchStrategy[dict]:
    return st.one_of(
        st.builds(lambda lo, span: {"type": "integer", "minimum": lo, "maximum": lo + span},
                  st.integers(-1000, 1000), st.integers(0, 1000)),
        st.just({"type": "boolean"}),
        st.builds(lambda n: {"type": "string", "maxLength": n}, st.integers(0, 8)),
        st.builds(lambda p: {"type": "string", "pattern": p}, st.sampled_from(["^[a-z]{1,5}$", "^[0-9]{3}$",
                                                                               "^(yes|no)$"])),
        st.builds(lambda values: {"enum": values},
                  st.lists(st.one_of(st.text(PRINTABLE, max_size=4), st.integers(-9, 9), st.booleans(), st.none()),
                           min_size=1, max_size=4, unique=True)),
        st.just({"type": "null"}),
    )


def _object(children: st.SearchStrategy[dict]) -> st.SearchStrategy[dict]:
    names = st.text(alphabet="abcdefgh_", min_size=1, max_size=6)

    def build(props: dict, required_mask: list[bool]) -> dict:
        required = [k for k, r in zip(props, required_mask, strict=False) if r]
        return {"type": "object", "properties": props, "required": required, "additionalProperties": False}

    return st.builds(build, st.dictionaries(names, children, min_size=1, max_size=4),
                     st.lists(st.booleans(), min_size=4, max_size=4))


def _array(children: st.SearchStrategy[dict]) -> st.SearchStrategy[dict]:
    return st.builds(lambda item, n: {"type": "array", "items": item, "maxItems": n}, children, st.integers(0, 3))


SCHEMAS = st.recursive(_leaf(), lambda children: st.one_of(_object(children), _array(children)), max_leaves=6) \
    .map(lambda s: s if s.get("type") == "object" else {"type": "object", "properties": {"value": s},
                                                        "required": ["value"], "additionalProperties": False})


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                HealthCheck.too_slow])
@given(schema=SCHEMAS, seed=st.integers(0, 2**32))
def test_random_model_output_always_fits_the_schema(tiny, schema, seed):
    result = tiny.generate(CHAT, temperature=1.0, seed=seed, max_tokens=800,
                           response_format={"type": "json_schema", "json_schema": {"name": "s", "schema": schema}})
    assert result.finish_reason == "stop", (schema, result.text)
    jsonschema.validate(json.loads(result.text), schema)


def test_json_mode_parses_whenever_it_ends(tiny):
    # json_object allows any key: random weights often open one and never close it, so some runs hit max_tokens
    ended = 0
    for seed in range(8):
        result = tiny.generate(CHAT, temperature=1.0, seed=seed, max_tokens=300,
                               response_format={"type": "json_object"})
        if result.finish_reason == "stop":
            ended += 1
            assert isinstance(json.loads(result.text), dict)
        else:
            assert result.finish_reason == "length" and result.text.startswith("{")
    assert ended >= 2


def test_grammars_in_lark_gbnf_and_regex(tiny):
    for grammar in ('start: "yes" | "no"', 'root ::= "yes" | "no"', {"regex": "(yes|no)"},
                    {"lark": 'start: "yes" | "no"'}):
        for seed in range(3):
            assert tiny.generate("Answer:", temperature=1.0, seed=seed, grammar=grammar).text in ("yes", "no")


def test_a_cut_off_says_length(tiny):
    schema = {"type": "object", "properties": {"text": {"type": "string", "minLength": 50}}, "required": ["text"]}
    result = tiny.generate(CHAT, temperature=1.0, seed=1, max_tokens=5,
                           response_format={"type": "json_schema", "json_schema": {"schema": schema}})
    assert result.finish_reason == "length"


def test_streaming_follows_the_grammar_too(tiny):
    schema = {"type": "object", "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 99}},
              "required": ["n"], "additionalProperties": False}
    text = "".join(tiny.stream(CHAT, temperature=1.0, seed=3, response_format={"type": "json_schema",
                                                                               "json_schema": {"schema": schema}}))
    jsonschema.validate(json.loads(text), schema)


@pytest.mark.parametrize(("options", "param"), [
    ({"response_format": {"type": "xml"}}, "response_format"),
    ({"response_format": {"type": "json_schema", "json_schema": {"schema": {"type": "object", "properties": {
        "a": {"type": "string", "format": "no-such-format"}}}}}}, "response_format"),
    ({"grammar": "start: undefined_rule"}, "grammar"),
    ({"response_format": {"type": "json_schema", "json_schema": {"schema": {"type": "object", "properties": {
        "a": {"enum": ["ok", "j\u0080h"]}}}}}}, "response_format"),
    ({"grammar": 42}, "grammar"),
    ({"response_format": {"type": "json_object"}, "grammar": 'start: "x"'}, "response_format"),
    ({"tool_choice": "required"}, "tool_choice"),
])
def test_refusals_name_what_is_not_supported(tiny, options, param):
    with pytest.raises(MnnEngineError) as err:
        tiny.generate(CHAT, max_tokens=5, **options)
    assert err.value.code == "invalid_argument" and err.value.param == param, err.value


def test_without_the_grammar_engine_the_answer_names_the_extra(tiny, monkeypatch):
    monkeypatch.setitem(sys.modules, "llguidance", None)
    with pytest.raises(MnnEngineError) as err:
        tiny.generate(CHAT, max_tokens=5, response_format={"type": "json_object"})
    assert err.value.code == "structured_output_unavailable" and "mnn-engine[structured]" in err.value.message
    assert tiny.generate(CHAT, max_tokens=3).finish_reason in ("stop", "length")  # free text still works


# ---------------------------------------------------------------- tools
@pytest.mark.parametrize("seed", range(4))
def test_required_tool_choice_always_gives_a_valid_call(tiny, seed):
    tools = [WEATHER, CLOCK]
    result = tiny.generate(CHAT, temperature=1.0, seed=seed, max_tokens=400, tools=tools, tool_choice="required")
    assert result.finish_reason == "stop"
    body = result.text.removeprefix(structured.TOOL_CALL_OPEN).removesuffix(structured.TOOL_CALL_CLOSE)
    call = json.loads(body)
    tool = next(t for t in tools if t["function"]["name"] == call["name"])
    jsonschema.validate(call["arguments"], tool["function"]["parameters"])


# ---------------------------------------------------------------- through the server and the openai SDK
server = server_fixture("tiny")
toolcall = server_fixture("tiny-toolcall")


class Person(pydantic.BaseModel):
    name: str = pydantic.Field(max_length=8)
    age: int = pydantic.Field(ge=0, le=120)
    likes_tea: bool


def test_sdk_parse_with_a_pydantic_model(server):
    for seed in range(3):
        completion = server.client.chat.completions.parse(model="any", messages=CHAT, response_format=Person,
                                                          temperature=1.0, seed=seed, max_tokens=300)
        person = completion.choices[0].message.parsed
        assert isinstance(person, Person), completion.choices[0].message.content


def test_sdk_streamed_json_schema(server):
    schema = {**Person.model_json_schema(), "additionalProperties": False}  # what strict schemas say
    stream = server.client.chat.completions.create(
        model="any", messages=CHAT, temperature=1.0, seed=5, max_tokens=300, stream=True,
        response_format={"type": "json_schema", "json_schema": {"name": "person", "schema": schema, "strict": True}})
    text = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
    Person.model_validate_json(text)


def test_server_refusals_are_400(server):
    status, _, body = server.post_json({"messages": CHAT, "response_format": {"type": "json_schema", "json_schema": {
        "schema": {"type": "string", "format": "no-such-format"}}}})
    assert status == 400 and body["error"]["param"] == "response_format", body


@pytest.mark.parametrize("choice", ["required", {"type": "function", "function": {"name": "get_time"}}])
def test_server_enforces_tool_choice(server, choice):
    for seed in range(2):
        response = server.client.chat.completions.create(model="any", messages=CHAT, tools=[WEATHER, CLOCK],
                                                         tool_choice=choice, temperature=1.0, seed=seed,
                                                         max_tokens=300)
        message = response.choices[0].message
        assert response.choices[0].finish_reason == "tool_calls" and len(message.tool_calls) == 1, message
        call = message.tool_calls[0].function
        if isinstance(choice, dict):
            assert call.name == "get_time"
        tool = next(t for t in (WEATHER, CLOCK) if t["function"]["name"] == call.name)
        jsonschema.validate(json.loads(call.arguments), tool["function"]["parameters"])


def test_the_tool_call_model_keeps_its_call_under_enforcement(toolcall):
    weather = dict(WEATHER, function={**WEATHER["function"], "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}})
    response = toolcall.client.chat.completions.create(model="any", messages=CHAT, tools=[weather],
                                                       tool_choice="required", temperature=0, max_tokens=300)
    call = response.choices[0].message.tool_calls[0].function
    assert call.name == "get_weather" and json.loads(call.arguments) == {"city": "Paris"}


def test_cli_generate_with_a_json_schema_file(tmp_path):
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"],
              "additionalProperties": False}
    (tmp_path / "schema.json").write_text(json.dumps(schema))
    result = subprocess.run([sys.executable, "-m", "mnn_engine", "generate", str(test_model_dir("tiny")), "hi",
                             "--json-schema", str(tmp_path / "schema.json"), "--temperature", "1", "--seed", "2",
                             "--threads", "1"], capture_output=True, text=True, cwd="/", timeout=300)
    assert result.returncode == 0, result.stderr
    jsonschema.validate(json.loads(result.stdout), schema)
