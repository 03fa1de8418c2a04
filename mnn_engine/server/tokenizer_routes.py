"""llama-server's tokenizer routes: ``POST /tokenize``, ``/detokenize`` and
``/apply-template``. The work runs on a worker thread (a long text takes a
while to tokenize), never on the event loop."""

from __future__ import annotations

from typing import Any

from tornado.ioloop import IOLoop

from ..errors import invalid
from ..openai_api import parse_chat_request
from .app import BodyHandler


def _field(body: Any, name: str, kind: type, default: Any = None) -> Any:
    if not isinstance(body, dict):
        raise invalid("body", "the body must be a JSON object")
    value = body.get(name, default)
    if value is None and default is None:
        raise invalid(name, f"'{name}' is required")
    if not isinstance(value, kind):
        raise invalid(name, f"'{name}' must be a {kind.__name__}")
    return value


class TokenizeHandler(BodyHandler):
    """``{"content": "...", "with_pieces": false}`` -> ``{"tokens": [...]}``; with
    pieces, each token's text (or its bytes, when they are not whole UTF-8)."""

    async def post(self) -> None:
        body = self.parse_body()
        content = _field(body, "content", str)
        with_pieces = _field(body, "with_pieces", bool, False)
        llm = self.ctx.engine.llm

        def work() -> list[Any]:
            ids = llm.tokenize(content)
            if not with_pieces:
                return ids
            pieces = []
            for token in ids:
                raw = llm.token_bytes(token)
                try:
                    piece: Any = raw.decode("utf-8")
                except UnicodeDecodeError:
                    piece = list(raw)
                pieces.append({"id": token, "piece": piece})
            return pieces

        self.send_json({"tokens": await IOLoop.current().run_in_executor(None, work)})


class DetokenizeHandler(BodyHandler):
    """``{"tokens": [...]}`` -> ``{"content": "..."}``."""

    async def post(self) -> None:
        tokens = _field(self.parse_body(), "tokens", list)
        llm = self.ctx.engine.llm
        self.send_json({"content": await IOLoop.current().run_in_executor(None, llm.detokenize, tokens)})


class ApplyTemplateHandler(BodyHandler):
    """``{"messages": [...]}`` (as for chat completions) -> ``{"prompt": "..."}``,
    the text the model's chat template makes of them."""

    async def post(self) -> None:
        body = self.parse_body()
        if not isinstance(body, dict):
            raise invalid("body", "the body must be a JSON object")
        request = parse_chat_request({"messages": body.get("messages"), "tools": body.get("tools"),
                                      "chat_template_kwargs": body.get("chat_template_kwargs")}, None)
        llm = self.ctx.engine.llm
        try:
            prompt = await IOLoop.current().run_in_executor(
                None, lambda: llm.apply_chat_template(request.messages, True, request.enable_thinking, request.tools))
        finally:
            request.cleanup()
        self.send_json({"prompt": prompt})


def routes(ctx: Any) -> list[tuple[str, type, dict[str, Any]]]:
    return [(r"/tokenize", TokenizeHandler, {"ctx": ctx}), (r"/detokenize", DetokenizeHandler, {"ctx": ctx}),
            (r"/apply-template", ApplyTemplateHandler, {"ctx": ctx})]

