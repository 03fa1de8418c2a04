"""Anthropic's Messages API, for the clients that speak it (the ``anthropic``
SDK, Claude-Code-style tools): ``POST /v1/messages`` (whole or as
Anthropic's server-sent events) and ``POST /v1/messages/count_tokens``.

The translation is ``api/anthropic_messages``; the generation is the one
``GenerationSession`` every route uses (queue, cancellation when the client
leaves, model by name). Errors keep the one error table's HTTP status in
Anthropic's shape (``{"type": "error", "error": {"type", "message"}}``): a
busy server is 429 ``rate_limit_error`` with ``Retry-After``, which the SDK
retries after the pause it asks for, as it does 503's ``api_error``.
The key may come as ``x-api-key`` (Anthropic's header) or as a bearer token
(``app.JsonHandler``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from ..api.anthropic_messages import (
    content_blocks,
    error_payload,
    message,
    message_id,
    messages_request,
    stop_reason,
    tool_use_block,
    usage,
)
from ..api.openai_chat import ChatRequest, Delta, MediaPolicy
from ..errors import MnnEngineError
from .app import BodyHandler
from .session import GenerationSession, Outcome


class AnthropicHandler(BodyHandler):
    """A route of Anthropic's: its error shape, its events."""

    def error_payload(self, exc: MnnEngineError) -> dict[str, Any]:
        return error_payload(exc)

    async def send_named_event(self, name: str, data: dict[str, Any]) -> None:
        """One of Anthropic's server-sent events (``event:`` line, then the data with its ``type``)."""
        await self.send_event({"type": name, **data}, name)

    async def request_for(self, *, counting: bool = False) -> tuple[str, ChatRequest]:
        body = self.parse_body()
        model = self.choose_model(body, strict=True)
        facts = await self.model_facts()
        policy = MediaPolicy(model_is_visual=facts.is_visual, model_is_audio=facts.is_audio, allow_file_urls=False)
        return model, await self.off_loop(lambda: messages_request(body, policy, counting=counting))


def _generated(outcome: Outcome) -> Callable[[], str]:
    """Every generated token's text, the stop string included (made only when asked for)."""
    return lambda: b"".join(map(outcome.token_bytes, outcome.result.token_ids)).decode("utf-8", "replace")


class MessagesHandler(AnthropicHandler):
    """POST /v1/messages."""

    async def post(self) -> None:
        model, request = await self.request_for()
        try:
            await self._answer(model, request)
        finally:
            request.cleanup()

    async def _answer(self, model: str, request: ChatRequest) -> None:
        session = GenerationSession.of_chat(self, request)
        msg_id = message_id()
        stops = request.sampling.get("stop")
        stops = [stops] if isinstance(stops, str) else stops
        if not request.stream:
            outcome = await session.whole()
            if outcome is None:
                return
            reason, sequence = stop_reason(outcome.result, outcome.tool_calls, stops, _generated(outcome))
            self.send_json(message(model, msg_id, content_blocks(outcome.deltas), reason, sequence,
                                   usage(outcome.result)))
            return
        blocks = _BlockStream(self)

        async def start() -> None:
            self.start_events()
            opening = {"input_tokens": session.prompt_tokens, "output_tokens": 0,
                       "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}
            await self.send_named_event("message_start", {"message": message(model, msg_id, [], None, None, opening)})
            await self.send_named_event("ping", {})

        async def emit_error(exc: MnnEngineError) -> None:
            await self.send_named_event("error", {"error": error_payload(exc)["error"]})

        outcome = await session.stream(start, blocks.emit, emit_error)
        if outcome is not None:
            await blocks.close()
            reason, sequence = stop_reason(outcome.result, outcome.tool_calls, stops, _generated(outcome))
            await self.send_named_event("message_delta", {"delta": {"stop_reason": reason, "stop_sequence": sequence},
                                                          "usage": usage(outcome.result)})
            await self.send_named_event("message_stop", {})
        if not self.closed:
            self.finish()


class _BlockStream:
    """Parsed output as Anthropic's content blocks: a block opens when the kind of output changes
    (thinking, text, a tool call), its deltas follow, and it closes before the next opens."""

    def __init__(self, handler: AnthropicHandler) -> None:
        self.handler = handler
        self.index = -1
        self.open: str | None = None

    async def _start(self, kind: str, block: dict[str, Any]) -> None:
        await self.close()
        self.index += 1
        self.open = kind
        await self.handler.send_named_event("content_block_start", {"index": self.index, "content_block": block})

    async def _delta(self, delta: dict[str, Any]) -> None:
        await self.handler.send_named_event("content_block_delta", {"index": self.index, "delta": delta})

    async def close(self) -> None:
        if self.open is not None:
            if self.open == "thinking":  # the SDK's thinking blocks carry a signature; ours is empty
                await self._delta({"type": "signature_delta", "signature": ""})
            await self.handler.send_named_event("content_block_stop", {"index": self.index})
            self.open = None

    async def emit(self, deltas: list[Delta]) -> None:
        for delta in deltas:
            if delta.kind in ("tool_call", "tool_call_arguments"):
                arguments = delta.tool_call["function"]["arguments"]
                if delta.kind == "tool_call":  # the call's first piece: its block opens with the input empty
                    await self._start("tool_use", {**tool_use_block(delta), "input": {}})
                if arguments:
                    await self._delta({"type": "input_json_delta", "partial_json": arguments})
            elif delta.text:
                kind = "thinking" if delta.kind == "reasoning" else "text"
                if self.open != kind:
                    await self._start(kind, {"type": kind, kind: "", **({"signature": ""} if kind == "thinking"
                                                                        else {})})
                await self._delta({"type": "thinking_delta", "thinking": delta.text} if kind == "thinking"
                                  else {"type": "text_delta", "text": delta.text})


class CountTokensHandler(AnthropicHandler):
    """POST /v1/messages/count_tokens: the prompt's tokens as the model's template renders it."""

    async def post(self) -> None:
        _model, request = await self.request_for(counting=True)
        try:
            # in the queue's turn: rendering sets MNN's template config, and an image runs the visual graph
            async with self.exclusive_turn() as engine:
                llm = engine.loaded_model
                ids = await asyncio.wrap_future(self.ctx.text_work.submit(
                    lambda: llm.prompt_ids(request.messages, enable_thinking=request.enable_thinking,
                                           tools=request.tools)))
        finally:
            request.cleanup()
        self.send_json({"input_tokens": len(ids)})


def routes(ctx: Any) -> list[tuple[str, Any, dict[str, Any]]]:
    return [(r"/v1/messages", MessagesHandler, {"ctx": ctx}),
            (r"/v1/messages/count_tokens", CountTokensHandler, {"ctx": ctx})]
