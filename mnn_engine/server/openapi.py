"""The OpenAPI description of the HTTP API, served at ``/openapi.json``.

A test keeps it in step with the routes of ``app.make_app`` and fuzzes the
server against it (schemathesis): every answer must be one of the statuses
documented here, and none a 5xx.
"""

from __future__ import annotations

from typing import Any

from .. import __version__
from ..errors import ERROR_CODES

_ERROR = {"$ref": "#/components/schemas/Error"}
_NUMBER = {"type": "number"}
_INTEGER = {"type": "integer"}


def _errors(*statuses: int, schema: dict[str, Any] = _ERROR) -> dict[str, Any]:
    out = {}
    for status in statuses:
        codes = sorted(code for code, kind in ERROR_CODES.items() if kind.http_status == status)
        out[str(status)] = {"description": "error: " + ", ".join(codes),
                            "content": {"application/json": {"schema": schema}}}
    return out


#: Statuses every route may answer before its handler runs: another web
#: page's origin or a foreign Host (403); Tornado's own bare 400 for a
#: malformed request is outside the API.
_COMMON = (403,)

_MESSAGE = {
    "type": "object",
    "required": ["role"],
    "properties": {
        "role": {"type": "string", "enum": ["system", "developer", "user", "assistant", "tool"]},
        "content": {"oneOf": [
            {"type": "string"},
            {"type": "null"},
            {"type": "array", "items": {"type": "object", "required": ["type"], "properties": {
                "type": {"type": "string", "enum": ["text", "image_url"]},
                "text": {"type": "string"},
                "image_url": {"oneOf": [{"type": "string"}, {"type": "object", "properties": {
                    "url": {"type": "string"}}}]},
            }}},
        ]},
        "name": {"type": "string"},
        "tool_calls": {"type": "array", "items": {"type": "object"}},
        "tool_call_id": {"type": "string"},
    },
}

_CHAT_REQUEST = {
    "type": "object",
    "required": ["messages"],
    "properties": {
        "model": {"type": "string", "description": "ignored: the active model answers"},
        "messages": {"type": "array", "minItems": 1, "items": _MESSAGE},
        "stream": {"type": "boolean"},
        "stream_options": {"type": "object", "properties": {"include_usage": {"type": "boolean"}}},
        "max_tokens": {**_INTEGER, "description": "-1: until an end token or the context limit"},
        "max_completion_tokens": _INTEGER,
        "n_predict": _INTEGER,
        "n": {"type": "integer", "enum": [1]},
        "temperature": {**_NUMBER, "minimum": 0},
        "top_p": {**_NUMBER, "minimum": 0, "exclusiveMinimum": True, "maximum": 1},
        "top_k": {**_INTEGER, "minimum": 0},
        "min_p": {**_NUMBER, "minimum": 0, "maximum": 1},
        "presence_penalty": {**_NUMBER, "minimum": -2, "maximum": 2},
        "frequency_penalty": {**_NUMBER, "minimum": -2, "maximum": 2},
        "repetition_penalty": {**_NUMBER, "minimum": 0, "exclusiveMinimum": True},
        "seed": _INTEGER,
        "logit_bias": {"type": "object", "additionalProperties": _NUMBER},
        "stop": {"oneOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}, "maxItems": 16}]},
        "logprobs": {"type": "boolean"},
        "top_logprobs": {**_INTEGER, "minimum": 0, "maximum": 20},
        "ignore_eos": {"type": "boolean"},
        "context_overflow": {"type": "string", "enum": ["error", "truncate"],
                             "description": "truncate: drop the oldest messages after the system prompt to fit "
                                            "(the X-Context-Dropped-Messages header says how many)"},
        "cache_prompt": {"type": "boolean",
                         "description": "reuse the KV cache of the previous request (default true; the "
                                        "outputs are the same either way)"},
        "speculative": {"type": "string", "enum": ["ngram", "off"],
                        "description": "prompt-lookup speculative decoding (default: the server's --speculative); "
                                       "usage.speculative counts drafts made and kept"},
        "draft_tokens": {**_INTEGER, "minimum": 1, "maximum": 15},
        "tools": {"type": "array", "items": {"type": "object"}},
        "tool_choice": {"oneOf": [{"type": "string", "enum": ["auto", "none", "required"]}, {"type": "object"}]},
        "response_format": {
            "type": "object", "required": ["type"],
            "properties": {"type": {"type": "string", "enum": ["text", "json_object", "json_schema"]},
                           "json_schema": {"type": "object", "properties": {"name": {"type": "string"},
                                                                           "schema": {"type": "object"},
                                                                           "strict": {"type": "boolean"}}}},
            "description": "json_object / json_schema: every token follows the JSON (schema); needs the "
                           "structured extra (400 structured_output_unavailable without it)"},
        "reasoning_effort": {"type": "string", "enum": ["none", "minimal", "low", "medium", "high"]},
        "chat_template_kwargs": {"type": "object", "properties": {"enable_thinking": {"type": "boolean"}}},
    },
}


_COMPLETION_REQUEST = {
    "type": "object",
    "required": ["prompt"],
    "properties": {
        "model": {"type": "string", "description": "ignored: the active model answers"},
        "prompt": {"oneOf": [{"type": "string"}, {"type": "array", "items": {"type": "integer", "minimum": 0}},
                             {"type": "array", "minItems": 1, "maxItems": 64, "items": {"oneOf": [
                                 {"type": "string"}, {"type": "array", "items": {"type": "integer", "minimum": 0}}]}}]},
        "max_tokens": _INTEGER, "temperature": _NUMBER, "top_p": _NUMBER, "seed": _INTEGER,
        "stream": {"type": "boolean"},
        "logprobs": {"type": "integer", "minimum": 0, "maximum": 5}, "echo": {"type": "boolean"},
        "speculative": {"type": "string", "enum": ["ngram", "off"]}, "draft_tokens": {**_INTEGER, "minimum": 1,
                                                                                     "maximum": 15},
        "stop": {"oneOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]},
    },
}

_IDS = {"type": "array", "minItems": 1, "items": {"type": "integer", "minimum": 0}}
_EMBEDDING_REQUEST = {
    "type": "object",
    "required": ["input"],
    "properties": {
        "model": {"type": "string", "description": "ignored: the active model answers"},
        "input": {"oneOf": [{"type": "string", "minLength": 1}, _IDS,
                            {"type": "array", "minItems": 1, "items": {"type": "string", "minLength": 1}},
                            {"type": "array", "minItems": 1, "items": _IDS}]},
        "encoding_format": {"type": "string", "enum": ["float", "base64"]},
        "dimensions": {"type": "integer", "minimum": 1},
        "user": {"type": "string"},
    },
}

_OLLAMA_OPTIONS = {"type": "object", "properties": {
    "temperature": _NUMBER, "top_p": _NUMBER, "top_k": _INTEGER, "min_p": _NUMBER, "seed": _INTEGER,
    "num_predict": _INTEGER, "repeat_penalty": _NUMBER, "presence_penalty": _NUMBER, "frequency_penalty": _NUMBER,
    "stop": {"type": "array", "items": {"type": "string"}}}}

_OLLAMA_COMMON = {"model": {"type": "string", "description": "ignored: the active model answers"},
                  "stream": {"type": "boolean", "description": "NDJSON lines (the default) or one object"},
                  "options": _OLLAMA_OPTIONS, "keep_alive": {"oneOf": [{"type": "string"}, _INTEGER]},
                  "think": {"type": "boolean"},
                  "format": {"oneOf": [{"type": "string", "enum": ["json"]}, {"type": "object"}]}}

_OLLAMA_CHAT = {"type": "object", "required": ["model", "messages"], "properties": {
    **_OLLAMA_COMMON, "messages": {"type": "array", "minItems": 1, "items": {
        "type": "object", "required": ["role", "content"], "properties": {
            "role": {"type": "string", "enum": ["system", "user", "assistant", "tool"]},
            "content": {"type": "string"}, "images": {"type": "array", "items": {"type": "string"}}}}},
    "tools": {"type": "array", "items": {"type": "object"}}}}

_OLLAMA_GENERATE = {"type": "object", "required": ["model"], "properties": {
    **_OLLAMA_COMMON, "prompt": {"type": "string"}, "system": {"type": "string"}, "raw": {"type": "boolean"}}}


def _post(summary: str, schema: dict[str, Any], statuses: tuple[int, ...], **content: Any) -> dict[str, Any]:
    ok = content or {"application/json": {"schema": {"type": "object"}}}
    return {"post": {"summary": summary, "security": [{"bearer": []}, {}],
                     "requestBody": {"required": True, "content": {"application/json": {"schema": schema}}},
                     "responses": {"200": {"description": "OK", "content": ok}, **_errors(*statuses, *_COMMON)}}}


#: Anthropic's Messages request (its API reference; the blocks are checked by api/anthropic_messages.py)
_ANTHROPIC_BLOCK = {"type": "object", "required": ["type"], "properties": {"type": {"type": "string"}}}
_ANTHROPIC_BLOCKS = {"oneOf": [{"type": "string"}, {"type": "array", "items": _ANTHROPIC_BLOCK}]}
_ANTHROPIC_REQUEST = {"type": "object", "required": ["model", "messages"], "properties": {
    "model": {"type": "string"}, "max_tokens": {"type": "integer", "minimum": 1}, "system": _ANTHROPIC_BLOCKS,
    "messages": {"type": "array", "minItems": 1, "items": {"type": "object", "required": ["role", "content"],
                                                           "properties": {"role": {"enum": ["user", "assistant"]},
                                                                          "content": _ANTHROPIC_BLOCKS}}},
    "stop_sequences": {"type": "array", "items": {"type": "string"}}, "stream": {"type": "boolean"},
    "temperature": {"type": "number", "minimum": 0, "maximum": 1}, "top_p": {"type": "number", "minimum": 0,
                                                                              "maximum": 1},
    "top_k": {"type": "integer", "minimum": 0}, "tools": {"type": "array", "items": {"type": "object"}},
    "tool_choice": {"type": "object"}, "thinking": {"type": "object"}, "output_config": {"type": "object"},
    "metadata": {"type": "object"}}}
_ANTHROPIC_ERROR = {"$ref": "#/components/schemas/AnthropicError"}
#: OpenAI's Responses request (its OpenAPI document; items and tools are checked by api/openai_responses.py)
_RESPONSES_REQUEST = {"type": "object", "required": ["input"], "properties": {
    "model": {"type": "string"}, "instructions": {"type": "string"},
    "input": {"oneOf": [{"type": "string"}, {"type": "array", "minItems": 1, "items": {"type": "object"}}]},
    "max_output_tokens": {"type": "integer", "minimum": 1}, "temperature": {"type": "number", "minimum": 0,
                                                                              "maximum": 2},
    "top_p": {"type": "number", "minimum": 0, "maximum": 1}, "seed": _INTEGER, "stream": {"type": "boolean"},
    "store": {"type": "boolean"}, "previous_response_id": {"type": "string"},
    "tools": {"type": "array", "items": {"type": "object"}}, "tool_choice": {"oneOf": [
        {"enum": ["auto", "none", "required"]}, {"type": "object"}]}, "parallel_tool_calls": {"type": "boolean"},
    "text": {"type": "object"}, "reasoning": {"type": "object"}, "metadata": {"type": "object"},
    "include": {"type": "array", "items": {"type": "string"}}, "top_logprobs": {**_INTEGER, "minimum": 0,
                                                                                "maximum": 20},
    "user": {"type": "string"}}}
_RESPONSE_ID = [{"name": "response_id", "in": "path", "required": True, "schema": {"type": "string"}}]


def _anthropic_post(summary: str, statuses: tuple[int, ...], **content: Any) -> dict[str, Any]:
    """A route of Anthropic's: its key may be x-api-key, its errors are in Anthropic's shape."""
    route = _post(summary, _ANTHROPIC_REQUEST, (), **content)
    route["post"]["security"] = [{"bearer": []}, {"x-api-key": []}, {}]
    route["post"]["responses"].update(_errors(*statuses, *_COMMON, schema=_ANTHROPIC_ERROR))
    return route


def _get(summary: str, **content: Any) -> dict[str, Any]:
    ok = content or {"application/json": {"schema": {"type": "object"}}}
    return {"get": {"summary": summary, "security": [{"bearer": []}, {}],
                    "responses": {"200": {"description": "OK", "content": ok}, **_errors(401, *_COMMON)}}}


_GENERATION_ERRORS = (400, 401, 413, 415, 422, 429, 500, 503)
#: Ollama's routes also answer 404 for a model they do not serve (as Ollama does), and need "model"
_OLLAMA_ERRORS = (*_GENERATION_ERRORS, 404)
_NDJSON = {"application/json": {"schema": {"type": "object"}}, "application/x-ndjson": {"schema": {"type": "string"}}}
#: llama-server's {"content"} or vLLM's {"prompt"}
_TEXT = {"type": "object", "oneOf": [{"required": ["content"]}, {"required": ["prompt"]}], "properties": {
    "content": {"type": "string"}, "prompt": {"type": "string"}, "with_pieces": {"type": "boolean"},
    "add_special_tokens": {"type": "boolean"}}}


def openapi_spec() -> dict[str, Any]:
    """The OpenAPI 3.0 document of this server's routes."""
    json_ok = {"description": "OK", "content": {"application/json": {"schema": {"type": "object"}}}}
    return {
        "openapi": "3.0.3",
        "info": {"title": "mnn-engine", "version": __version__,
                 "description": "An MNN model on the device as an OpenAI-compatible HTTP API."},
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"},
                                "x-api-key": {"type": "apiKey", "in": "header", "name": "x-api-key"}},
            "schemas": {"Error": {"type": "object", "required": ["error"], "properties": {"error": {
                "type": "object", "required": ["message", "type", "code"],
                "properties": {"message": {"type": "string"}, "type": {"type": "string"},
                               "param": {"type": "string", "nullable": True},
                               "code": {"type": "string", "enum": sorted(ERROR_CODES)}}}}},
                "AnthropicError": {"type": "object", "required": ["type", "error"], "properties": {
                    "type": {"enum": ["error"]}, "error": {"type": "object", "required": ["type", "message"],
                                                           "properties": {"type": {"type": "string"},
                                                                          "message": {"type": "string"},
                                                                          "code": {"enum": sorted(ERROR_CODES)}}}}}},
        },
        "paths": {
            "/": {"get": {"summary": "the built-in chat page", "responses": {
                "200": {"description": "HTML", "content": {"text/html": {"schema": {"type": "string"}}}},
                **_errors(*_COMMON)}}},
            "/static/{name}": {"get": {
                "summary": "the chat page's files (its script, style sheet and vendored libraries); public",
                "parameters": [{"name": "name", "in": "path", "required": True, "schema": {"type": "string"}}],
                "responses": {"200": {"description": "the file"}, "304": {"description": "not modified"},
                              **_errors(404, *_COMMON)}}},
            "/health": {"get": {"summary": "engine, model, server and generation state",
                                "responses": {"200": json_ok, **_errors(*_COMMON)}}},
            "/openapi.json": {"get": {"summary": "this document", "responses": {"200": json_ok, **_errors(*_COMMON)}}},
            "/v1/models": {"get": {"summary": "every model served, loaded or not", "security": [{"bearer": []}, {}],
                                   "responses": {"200": json_ok, **_errors(401, *_COMMON)}}},
            "/v1/models/{model}": {"get": {
                "summary": "one model by ID, OpenAI's Model object",
                "security": [{"bearer": []}, {}],
                "parameters": [{"name": "model", "in": "path", "required": True, "schema": {"type": "string"}}],
                "responses": {"200": json_ok, **_errors(401, 404, *_COMMON)}}},
            "/v1/chat/completions": {"post": {
                "summary": "a chat completion, streamed (text/event-stream) or not",
                "security": [{"bearer": []}, {}],
                "requestBody": {"required": True, "content": {"application/json": {"schema": _CHAT_REQUEST}}},
                "responses": {
                    "200": {"description": "the completion (JSON), or its chunks (SSE) when stream is true",
                            "content": {"application/json": {"schema": {"type": "object"}},
                                        "text/event-stream": {"schema": {"type": "string"}}}},
                    **_errors(400, 401, 413, 415, 422, 429, 500, 503, *_COMMON),
                },
            }},
            "/v1/completions": _post("a text completion (no chat template), streamed (SSE) or not",
                                     _COMPLETION_REQUEST, _GENERATION_ERRORS,
                                     **{"application/json": {"schema": {"type": "object"}},
                                        "text/event-stream": {"schema": {"type": "string"}}}),
            "/v1/embeddings": _post("embeddings of texts or token ids (a text-embedding model)", _EMBEDDING_REQUEST,
                                    _GENERATION_ERRORS),
            "/tokenize": _post("token ids of a text (llama-server's shape, or vLLM's with prompt)", _TEXT,
                               (400, 401, 413, 415, 503)),
            "/tokenizer_info": _get("the tokenizer's special tokens and chat template (vLLM's shape)"),
            "/detokenize": _post("the text of token ids", {"type": "object", "required": ["tokens"], "properties": {
                "tokens": {"type": "array", "items": {"type": "integer", "minimum": 0}}}}, (400, 401, 413, 415, 503)),
            "/apply-template": _post("the prompt the chat template makes of messages", {
                "type": "object", "required": ["messages"], "properties": {
                    "messages": {"type": "array", "minItems": 1, "items": _MESSAGE}}}, (400, 401, 413, 415, 422, 503)),
            "/v1/responses": _post("OpenAI's Responses API: a response, or its events (SSE) when stream is true",
                                   _RESPONSES_REQUEST, (*_GENERATION_ERRORS, 404),
                                   **{"application/json": {"schema": {"type": "object"}},
                                      "text/event-stream": {"schema": {"type": "string"}}}),
            "/v1/responses/{response_id}": {
                "get": {"summary": "a stored response", "security": [{"bearer": []}, {}],
                        "parameters": _RESPONSE_ID, "responses": {"200": json_ok, **_errors(401, 404, *_COMMON)}},
                "delete": {"summary": "delete a stored response", "security": [{"bearer": []}, {}],
                           "parameters": _RESPONSE_ID, "responses": {"200": json_ok, **_errors(401, 404, *_COMMON)}}},
            "/v1/responses/{response_id}/input_items": {"get": {
                "summary": "a stored response's input items", "security": [{"bearer": []}, {}],
                "parameters": [*_RESPONSE_ID, {"name": "order", "in": "query", "schema": {"enum": ["asc", "desc"]}},
                               {"name": "limit", "in": "query", "schema": {"type": "integer", "minimum": 1,
                                                                           "maximum": 100}},
                               {"name": "after", "in": "query", "schema": {"type": "string"}}],
                "responses": {"200": json_ok, **_errors(400, 401, 404, *_COMMON)}}},
            "/v1/messages": _anthropic_post(
                "Anthropic's Messages API: an answer, or Anthropic's server-sent events when stream is true",
                (*_GENERATION_ERRORS, 404), **{"application/json": {"schema": {"type": "object"}},
                                               "text/event-stream": {"schema": {"type": "string"}}}),
            "/v1/messages/count_tokens": _anthropic_post("Anthropic's Messages API: the prompt's token count",
                                                         (*_GENERATION_ERRORS, 404)),
            "/metrics": _get("Prometheus metrics", **{"text/plain": {"schema": {"type": "string"}}}),
            "/events": _get("the engine's events (model, generation, server, pull) as server-sent events",
                            **{"text/event-stream": {"schema": {"type": "string"}}}),
            "/api/version": _get("Ollama: the API version"),
            "/api/tags": _get("Ollama: every model served, loaded or not"),
            "/api/ps": _get("Ollama: the loaded models, with when each expires"),
            "/api/show": _post("Ollama: the loaded model's details", {"type": "object", "required": ["model"],
                                                                      "properties": {"model": {"type": "string"}}},
                               (400, 401, 404, 413, 415, 503)),
            "/api/chat": _post("Ollama: a chat answer, NDJSON lines or one object", _OLLAMA_CHAT,
                               _OLLAMA_ERRORS, **_NDJSON),
            "/api/generate": _post("Ollama: a completion of a prompt, NDJSON lines or one object", _OLLAMA_GENERATE,
                                   _OLLAMA_ERRORS, **_NDJSON),
            "/api/pull": _post("Ollama: pull a model into the store (catalog name, hf:, modelscope: or a manifest "
                               "URL)", {"type": "object", "required": ["model"], "properties": {
                                   "model": {"type": "string"}, "stream": {"type": "boolean"}}},
                               (400, 401, 404, 409, 413, 415, 422, 502, 507), **_NDJSON),
            "/api/embed": _post("Ollama: unit-length embeddings of a text or texts", {
                "type": "object", "required": ["model", "input"], "properties": {
                    "model": {"type": "string"}, "truncate": {"type": "boolean"},
                    "dimensions": {"type": "integer", "minimum": 1}, "keep_alive": {"oneOf": [{"type": "string"},
                                                                                             _INTEGER]},
                    "options": _OLLAMA_OPTIONS,
                    "input": {"oneOf": [{"type": "string", "minLength": 1},
                                        {"type": "array", "minItems": 1, "items": {"type": "string", "minLength": 1}}]},
                }}, _OLLAMA_ERRORS),
            "/api/embeddings": _post("Ollama (older route): the embedding of one prompt", {
                "type": "object", "required": ["model", "prompt"], "properties": {
                    "model": {"type": "string"}, "prompt": {"type": "string", "minLength": 1}}}, _OLLAMA_ERRORS),
        },
    }
