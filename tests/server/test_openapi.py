"""/openapi.json matches the routes, and the server, fuzzed against it, answers
only documented statuses and never a 5xx (schemathesis)."""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import HealthCheck, given, settings
from live_server import KEY, Live

from mnn_engine.server.app import PUBLIC_PATHS, ServerContext
from mnn_engine.server.openapi import openapi_spec
from mnn_engine.server.routes import make_app

schemathesis = pytest.importorskip("schemathesis")
from schemathesis.checks import (  # noqa: E402
    content_type_conformance,
    not_a_server_error,
    status_code_conformance,
)
from schemathesis.generation import GenerationMode  # noqa: E402

#: Keeps each fuzzed generation short: the fuzzer is after the parser, not the model.
MAX_FUZZ_TOKENS = 8


def _route_paths() -> set[str]:
    app = make_app(ServerContext(models=None))  # type: ignore[arg-type]
    paths = set()
    for rule in app.default_router.rules[0].target.rules:
        pattern = rule.matcher.regex.pattern.rstrip("$").replace("\\", "")
        paths.add(re.sub(r"\(\?P<(\w+)>[^)]*\)", r"{\1}", pattern))  # (?P<model>.+) is OpenAPI's {model}
    return paths


def test_spec_documents_exactly_the_routes():
    assert set(openapi_spec()["paths"]) == _route_paths()


def test_spec_is_served(api):
    status, _, body = api.request("GET", "/openapi.json")
    assert status == 200 and json.loads(body) == json.loads(json.dumps(openapi_spec()))


def test_every_error_code_of_the_chat_route_is_documented():
    responses = openapi_spec()["paths"]["/v1/chat/completions"]["post"]["responses"]
    described = " ".join(r["description"] for r in responses.values())
    for code in ("invalid_argument", "context_length_exceeded", "busy", "unauthorized", "forbidden",
                 "payload_too_large", "unsupported_media_type", "server_stopping"):
        assert re.search(rf"\b{code}\b", described), code


@pytest.fixture(scope="module")
def api(tmp_path_factory):
    live = Live(tmp_path_factory.mktemp("store"), "tiny", api_key=KEY)
    yield live
    live.close()


#: /api/pull is left out: a fuzzed name would reach for the network; /events too: it takes no parameters to
#: fuzz and its stream never ends (each call waited out the client's timeout); test_wire.py reads it
SCHEMA = schemathesis.openapi.from_dict(openapi_spec())
OPERATIONS = [op for op in (result.ok() for result in SCHEMA.get_all_operations())
              if op.path not in ("/api/pull", "/events")]


def _bounded(case, mode=None) -> None:
    """Short generations: the fuzzer is after the request parser, not the model. Schema-valid
    Ollama and Anthropic requests name the served model (a random name is a 404 before any parsing)."""
    if isinstance(case.body, dict):
        if mode is GenerationMode.POSITIVE and case.path.startswith(("/api/", "/v1/messages")) and "model" in case.body:
            case.body["model"] = "tiny"
        for name in ("max_tokens", "max_completion_tokens", "n_predict"):
            value = case.body.get(name)
            if isinstance(value, int) and not isinstance(value, bool):
                case.body[name] = min(value, MAX_FUZZ_TOKENS) or 1
        case.body.pop("ignore_eos", None)
        case.body.setdefault("max_tokens", MAX_FUZZ_TOKENS)
        options = case.body.setdefault("options", {})  # Ollama's routes
        if isinstance(options, dict):
            value = options.get("num_predict")
            options["num_predict"] = min(value, MAX_FUZZ_TOKENS) if isinstance(value, int) and value > 0 else \
                MAX_FUZZ_TOKENS


#: every route with schema-valid requests; the one that takes a body also with schema-breaking ones
FUZZ = [(op, GenerationMode.POSITIVE) for op in OPERATIONS] + [
    (op, GenerationMode.NEGATIVE) for op in OPERATIONS if op.method == "post"]


@pytest.mark.parametrize(("operation", "mode"), FUZZ, ids=lambda x: getattr(x, "label", getattr(x, "value", "")))
def test_fuzzed_requests_get_documented_answers(api, operation, mode):
    examples = 60 if operation.method == "post" else 10

    @settings(max_examples=examples, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(case=operation.as_strategy(generation_mode=mode))
    def check(case):
        _bounded(case, mode)
        headers = {} if case.path in PUBLIC_PATHS else {"Authorization": f"Bearer {KEY}"}
        api.wait_idle()
        case.call_and_validate(base_url=api.url, headers=headers, timeout=60,
                               checks=[not_a_server_error, status_code_conformance, content_type_conformance])

    check()


def test_a_preflight_of_every_documented_route_is_a_204(api, caplog):
    """OPTIONS skips auth (a browser's preflight carries no key), so it must
    answer every route alike: routes with a path parameter (``/v1/models/{model}``,
    ``/static/{name}``) pass it by name, and a handler that took positional
    arguments only answered 500 with two tracebacks per request."""
    for path in openapi_spec()["paths"]:
        concrete = re.sub(r"\{\w+\}", "x", path)
        status, _, body = api.request("OPTIONS", concrete, headers={
            "Origin": f"http://{api.host}:{api.port}", "Access-Control-Request-Method": "GET"})
        assert status == 204, (path, status, body[:200])
    assert "Traceback" not in caplog.text
