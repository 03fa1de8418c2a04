"""Anthropic's answers checked with the ``anthropic`` SDK's own pydantic types, strictly (no field the
SDK does not declare, at any depth): what ``tests/openai_schemas.py`` is for OpenAI's routes."""

from __future__ import annotations

import json
from typing import Any

import pydantic
from anthropic.types import Message, MessageTokensCount, ModelInfo, RawMessageStreamEvent
from anthropic.types.shared import ErrorResponse

EVENTS = pydantic.TypeAdapter(RawMessageStreamEvent)


def _extra(model: pydantic.BaseModel, where: str) -> list[str]:
    found = [f"{where}: {sorted(model.model_extra)} not in {type(model).__name__}"] if model.model_extra else []
    for name, value in model.__dict__.items():
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, pydantic.BaseModel):
                found += _extra(item, f"{where}.{name}")
    return found


def violations(path: str, status: int, body: Any, event: str | None = None) -> list[str]:
    """What of an answer (or a stream's event, by its name) the SDK's types do not read as they are."""
    if event == "ping":
        return [] if body == {"type": "ping"} else [f"ping: {body}"]
    if status >= 400 or event == "error":
        body = {k: v for k, v in body.items()}
        body["error"] = {k: v for k, v in body["error"].items() if k != "code"}  # this server's stable code
        kind: Any = ErrorResponse
    elif event is not None:
        kind = EVENTS
    elif path == "anthropic:/v1/models":  # the SDK's page of ModelInfo: data, has_more, first_id, last_id
        if set(body) != {"data", "has_more", "first_id", "last_id"}:
            return [f"the model list's fields: {sorted(body)}"]
        return [problem for item in body["data"] for problem in violations("anthropic:/v1/models/x", status, item)]
    elif path.startswith("anthropic:/v1/models/"):
        kind = ModelInfo
    else:
        kind = MessageTokensCount if path.endswith("/count_tokens") else Message
    try:
        text = json.dumps(body)  # as the wire has it (strict JSON mode reads an RFC 3339 string as a datetime)
        model = kind.validate_json(text, strict=True) if kind is EVENTS else kind.model_validate_json(text, strict=True)
    except pydantic.ValidationError as exc:
        return [str(exc)]
    return _extra(model, type(model).__name__)
