"""Anthropic's answers checked with the ``anthropic`` SDK's own pydantic types, strictly (no field the
SDK does not declare, at any depth): what ``tests/openai_schemas.py`` is for OpenAI's routes."""

from __future__ import annotations

from typing import Any

import pydantic
from anthropic.types import Message, MessageTokensCount, RawMessageStreamEvent
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
    else:
        kind = MessageTokensCount if path.endswith("/count_tokens") else Message
    try:
        model = kind.validate_python(body, strict=True) if kind is EVENTS else kind.model_validate(body, strict=True)
    except pydantic.ValidationError as exc:
        return [str(exc)]
    return _extra(model, type(model).__name__)
