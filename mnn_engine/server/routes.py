"""Every route of the server, by dialect: the server's own (page, health,
API description), OpenAI's (the Responses API among them), llama-server's tokenizer routes, Ollama's,
Anthropic's Messages API, and the metrics."""

from __future__ import annotations

from typing import Any

import tornado.web

from . import anthropic, events, metrics, ollama, responses, tokenizer_routes
from .app import (
    ChatCompletionsHandler,
    HealthHandler,
    ModelsHandler,
    NotFoundHandler,
    OpenApiHandler,
    ServerContext,
    log_request,
)
from .completions import CompletionsHandler
from .embeddings import EmbeddingsHandler
from .page import PageHandler


def make_app(ctx: ServerContext) -> tornado.web.Application:
    handlers: list[Any] = [
        (r"/", PageHandler, {"ctx": ctx}),
        (r"/static/(?P<name>[\w./-]+)", PageHandler, {"ctx": ctx}),
        (r"/health", HealthHandler, {"ctx": ctx}),
        (r"/openapi.json", OpenApiHandler, {"ctx": ctx}),
        (r"/v1/models", ModelsHandler, {"ctx": ctx}),
        (r"/v1/models/(?P<model>.+)", ModelsHandler, {"ctx": ctx}),
        (r"/v1/chat/completions", ChatCompletionsHandler, {"ctx": ctx}),
        (r"/v1/completions", CompletionsHandler, {"ctx": ctx}),
        (r"/v1/embeddings", EmbeddingsHandler, {"ctx": ctx}),
        *responses.routes(ctx),
        *tokenizer_routes.routes(ctx),
        *ollama.routes(ctx),
        *anthropic.routes(ctx),
        *metrics.routes(ctx),
        *events.routes(ctx),
    ]
    ctx.routes = frozenset(pattern for pattern, *_ in handlers)
    settings: dict[str, Any] = {"log_function": log_request if ctx.settings.access_log else lambda handler: None}
    return tornado.web.Application(
        handlers,
        default_handler_class=NotFoundHandler,
        default_handler_args={"ctx": ctx},
        compress_response=False,
        **settings,
    )

