"""OpenAI's Responses API: ``POST /v1/responses`` (whole, or its documented
stream of events with ``sequence_number``s), ``GET`` and ``DELETE
/v1/responses/{id}`` and ``GET /v1/responses/{id}/input_items`` for stored
responses.

The translation is ``api/openai_responses``; the generation is the one
``GenerationSession`` every route uses; stored responses are
``api/response_store`` (in memory, bounded, lost when the server stops).
Errors are OpenAI's shape, as on the chat route.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from .. import jsonutil
from ..api.openai_chat import Delta, MediaPolicy
from ..api.openai_responses import (
    ResponsesRequest,
    function_call_item,
    message_item,
    message_logprobs,
    new_id,
    output_text,
    reasoning_item,
    response,
    responses_request,
)
from ..checks import invalid
from ..errors import MnnEngineError
from .app import BodyHandler, JsonHandler
from .session import GenerationSession, Outcome


class ResponsesHandler(BodyHandler):
    """POST /v1/responses."""

    async def post(self) -> None:
        body = self.parse_body()
        model = self.choose_model(body)
        previous = body.get("previous_response_id") if isinstance(body, dict) else None
        if previous is not None and not isinstance(previous, str):
            raise invalid("previous_response_id", "must be a response's id")
        history = self.ctx.responses.get(previous).conversation if previous else []
        facts = await self.model_facts()
        policy = MediaPolicy(model_is_visual=facts.is_visual, model_is_audio=facts.is_audio,
                             allow_file_urls=self.ctx.settings.allow_file_urls)
        request = await self.off_loop(responses_request, body, history, policy)
        try:
            await self._answer(model, request)
        finally:
            request.chat.cleanup()

    async def _answer(self, model: str, request: ResponsesRequest) -> None:
        session = GenerationSession.of_chat(self, request.chat)
        response_id, created = new_id("resp"), time.time()
        if not request.stream:
            outcome = await session.whole()
            if outcome is None:
                return
            items = _ItemStream(None)  # the same items a stream builds, without its events
            await items.emit(outcome.deltas)
            await items.close(outcome)
            answer = response(response_id, model, request, created, items.done, outcome.result)
            await self._store(request, answer)
            self.send_json(answer)
            return
        items = _ItemStream(self)

        async def start() -> None:
            self.start_events()
            opening = response(response_id, model, request, created, [], None)
            await items.event("response.created", response=opening)
            await items.event("response.in_progress", response=opening)

        async def emit_error(exc: MnnEngineError) -> None:
            await items.event("error", code=exc.code, message=exc.message, param=exc.param)

        outcome = await session.stream(start, items.emit, emit_error)
        if outcome is not None:
            await items.close(outcome)
            answer = response(response_id, model, request, created, items.done, outcome.result)
            await self._store(request, answer)
            await items.event(f"response.{answer['status']}", response=answer)
        if not self.closed:
            self.finish()

    async def _store(self, request: ResponsesRequest, answer: dict[str, Any]) -> None:
        """Keep the answer (off the IOLoop: the store sizes the conversation, whose images may be megabytes)."""
        if request.store:
            await self.off_loop(self.ctx.responses.put, answer, request.input_items,
                                [*request.history, *request.input_items, *answer["output"]])


class _ItemStream:
    """Parsed output as the Responses API's output items and their events: an item opens when the
    kind of output changes (reasoning, a message, a function call), its deltas follow, and it is
    done before the next opens. Without a handler it only builds the items (a whole answer's).

    Log-probabilities exist once the generation has ended (the engine gives them with its result), so
    a message's text deltas carry none; the last item's done events and every message of the final
    response carry them (a message closed earlier, before a tool call, has them in the response only).
    """

    def __init__(self, handler: BodyHandler | None) -> None:
        self.handler = handler
        self.sequence = 0
        self.done: list[dict[str, Any]] = []
        self.item: dict[str, Any] | None = None
        self.logprobs: list[dict[str, Any]] = []  # the open message's, once the generation has ended

    async def event(self, kind: str, /, **data: Any) -> None:
        if self.handler is not None:
            await self.handler.send_event({"type": kind, **data, "sequence_number": self.sequence}, kind)
        self.sequence += 1

    def _where(self) -> dict[str, Any]:
        return {"item_id": self.item["id"], "output_index": len(self.done)}

    async def _open(self, item: dict[str, Any]) -> None:
        await self.close()
        self.item = item
        await self.event("response.output_item.added", output_index=len(self.done), item=item)
        if item["type"] == "message":
            await self.event("response.content_part.added", **self._where(), content_index=0, part=output_text(""))

    async def close(self, outcome: Outcome | None = None) -> None:
        """Close the open item; with the generation's ``outcome`` (at the end), messages get their
        log-probabilities."""
        item = self.item
        if outcome is not None:
            self._attach_logprobs(outcome)
        if item is None:
            return
        where = self._where()
        if item["type"] == "message":
            text, logprobs = item["text"], self.logprobs
            await self.event("response.output_text.done", **where, content_index=0, text=text, logprobs=logprobs)
            await self.event("response.content_part.done", **where, content_index=0,
                             part=output_text(text, logprobs))
            finished = message_item(item["id"], text, logprobs=logprobs)
        elif item["type"] == "reasoning":
            await self.event("response.reasoning_text.done", **where, content_index=0, text=item["text"])
            finished = reasoning_item(item["id"], item["text"])
        else:
            await self.event("response.function_call_arguments.done", **where, name=item["name"],
                             arguments=item["arguments"])
            finished = {**item, "status": "completed"}
        await self.event("response.output_item.done", output_index=len(self.done), item=finished)
        self.item = None
        self.done.append(finished)

    def _attach_logprobs(self, outcome: Outcome) -> None:
        if outcome.result.logprobs is None:
            return  # not asked for: every message keeps its empty list
        done = [i for i in self.done if i["type"] == "message"]
        texts = [i["content"][0]["text"] for i in done]
        is_open = self.item is not None and self.item["type"] == "message"
        found = message_logprobs([*texts, self.item["text"]] if is_open else texts,
                                 outcome.result.logprobs, outcome.token_bytes)
        for item, logprobs in zip(done, found, strict=False):  # found has the open one last
            item["content"][0]["logprobs"] = logprobs
        if is_open:
            self.logprobs = found[-1]

    async def emit(self, deltas: list[Delta]) -> None:
        for delta in deltas:
            if delta.kind == "tool_call":  # a call's first piece: its item opens with the arguments so far
                call = delta.tool_call
                await self._open({**function_call_item(new_id("fc"), call, status="in_progress"), "arguments": ""})
                pieces = call["function"]["arguments"]
            elif delta.kind == "tool_call_arguments":
                pieces = delta.tool_call["function"]["arguments"]
            elif delta.text:
                kind = "reasoning" if delta.kind == "reasoning" else "message"
                if self.item is None or self.item["type"] != kind:
                    item = reasoning_item(new_id("rs"), "") if kind == "reasoning" else \
                        message_item(new_id("msg"), "", status="in_progress")
                    await self._open(item)
                    self.item["text"] = ""  # kept apart from the item's shape until it is done
                self.item["text"] += delta.text
                name = "response.reasoning_text.delta" if kind == "reasoning" else "response.output_text.delta"
                extra = {} if kind == "reasoning" else {"logprobs": []}
                await self.event(name, **self._where(), content_index=0, delta=delta.text, **extra)
                continue
            else:
                continue
            if pieces:
                self.item["arguments"] += pieces
                await self.event("response.function_call_arguments.delta", **self._where(), delta=pieces)


class StoredResponseHandler(JsonHandler):
    """GET and DELETE /v1/responses/{id}."""

    async def get(self, response_id: str) -> None:
        self.send_json(self.ctx.responses.get(response_id).response)

    async def delete(self, response_id: str) -> None:
        self.ctx.responses.delete(response_id)
        self.send_json({"id": response_id, "object": "response", "deleted": True})


class InputItemsHandler(JsonHandler):
    """GET /v1/responses/{id}/input_items: a stored response's own input items (OpenAI's list, newest first
    unless ``order=asc``)."""

    async def get(self, response_id: str) -> None:
        items = list(self.ctx.responses.get(response_id).input_items)
        order = self.get_query_argument("order", "desc")
        if order not in ("asc", "desc"):
            raise invalid("order", "must be asc or desc")
        if order == "desc":
            items.reverse()
        limit = self.get_query_argument("limit", "20")
        if not limit.isdigit() or not 1 <= int(limit) <= 100:
            raise invalid("limit", "must be 1 to 100")
        after = self.get_query_argument("after", None)
        if after is not None:
            ids = [i["id"] for i in items]
            items = items[ids.index(after) + 1:] if after in ids else []
        page = items[:int(limit)]
        listing = {"object": "list", "data": page, "first_id": page[0]["id"] if page else None,
                   "last_id": page[-1]["id"] if page else None, "has_more": len(items) > len(page)}
        # serialised off the IOLoop: input images are data URLs of up to megabytes
        self.send_json_bytes(await asyncio.wrap_future(self.ctx.text_work.submit(jsonutil.dumps, listing)))


def routes(ctx: Any) -> list[tuple[str, Any, dict[str, Any]]]:
    return [(r"/v1/responses", ResponsesHandler, {"ctx": ctx}),
            (r"/v1/responses/(?P<response_id>[\w-]+)", StoredResponseHandler, {"ctx": ctx}),
            (r"/v1/responses/(?P<response_id>[\w-]+)/input_items", InputItemsHandler, {"ctx": ctx})]

