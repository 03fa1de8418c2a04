"""The tokenizer routes: llama-server's ``POST /tokenize``, ``/detokenize`` and
``/apply-template``, which also answer vLLM's shapes (``/tokenize`` with
``prompt``, ``/detokenize``'s ``prompt``) with vLLM's ``GET /tokenizer_info``:
what remote tokenizers (lm-eval's ``tokenizer_backend=remote``) call. The work
runs on a worker thread (a long text takes a while to tokenize), never on the
event loop. A body's ``model`` (``/tokenizer_info``: the query's) picks the
model, as in llama-server's router mode (none: the server's default); it is
loaded if need be."""

from __future__ import annotations

import asyncio
from typing import Any

from .. import jsonutil
from ..api.openai_chat import parse_chat_request
from ..checks import Rule, invalid, obj
from ..errors import MnnEngineError
from .app import BodyHandler


def _field(body: Any, name: str, kind: type, default: Any = None) -> Any:
    """``body[name]`` of ``kind`` (``str``, ``bool``; ``list``: any list, checked by its reader), required
    without a ``default``."""
    value = obj(body, "body").get(name, default)
    if value is None and default is None:
        raise invalid(name, "is required")
    if kind is list and not isinstance(value, list):
        raise invalid(name, f"must be a list (got {type(value).__name__})")
    return value if kind is list else Rule(kind).check(value, name)


class TokenizeHandler(BodyHandler):
    """``{"content": "...", "with_pieces": false}`` -> ``{"tokens": [...]}``; with
    pieces, each token's text (or its bytes, when they are not whole UTF-8).
    vLLM's ``{"prompt": "...", "add_special_tokens": ...}`` -> ``{"count": n,
    "max_model_len": context, "tokens": [...]}`` (MNN's tokenizers add no
    special tokens of their own: the chat template writes them, so both values
    of ``add_special_tokens`` give the same ids). The content may have at most
    the model's context of tokens; the answer is built as JSON text on a worker
    thread (5.9 MB of text with pieces made 83 MiB of dicts on the IOLoop
    before)."""

    async def post(self) -> None:
        body = self.parse_body()
        vllm = isinstance(body, dict) and "prompt" in body and "content" not in body
        content = _field(body, "prompt" if vllm else "content", str)
        with_pieces = _field(body, "with_pieces", bool, False)
        _field(body, "add_special_tokens", bool, True)
        self.choose_model(body)
        async with self.leased() as engine:
            await self._tokenize(engine.loaded_model, content, with_pieces, vllm)

    async def _tokenize(self, llm: Any, content: str, with_pieces: bool, vllm: bool) -> None:
        llm.check_prompt(content)  # the quick bound: more bytes than the context can hold

        def work() -> bytes:
            ids = llm.tokenize(content, limit=llm.context_length)
            if not with_pieces:
                head = b'{"count":%d,"max_model_len":%d,' % (len(ids), llm.context_length) if vllm else b"{"
                return head + b'"tokens":' + jsonutil.dumps(ids) + b"}"
            pieces: dict[int, bytes] = {}  # each distinct token's JSON once
            for token in ids:
                if token not in pieces:
                    raw = llm.token_bytes(token)
                    try:
                        piece: Any = raw.decode("utf-8")
                    except UnicodeDecodeError:
                        piece = list(raw)
                    pieces[token] = b'{"id":%d,"piece":%s}' % (token, jsonutil.dumps(piece))
            return b'{"tokens":[' + b",".join(pieces[token] for token in ids) + b"]}"

        self.send_json_bytes(await asyncio.wrap_future(self.ctx.text_work.submit(work)))


class DetokenizeHandler(BodyHandler):
    """``{"tokens": [...]}`` -> ``{"content": "...", "prompt": "..."}`` (the text under llama-server's
    name and vLLM's)."""

    async def post(self) -> None:
        body = self.parse_body()
        tokens = _field(body, "tokens", list)
        self.choose_model(body)
        async with self.leased() as engine:
            llm = engine.loaded_model
            if len(tokens) > llm.context_length:
                raise MnnEngineError("context_length_exceeded", f"{len(tokens)} tokens; at most the context's "
                                     f"{llm.context_length} are detokenized at once", param="tokens")
            text = await asyncio.wrap_future(self.ctx.text_work.submit(llm.detokenize, tokens))
        self.send_json({"content": text, "prompt": text})


class ApplyTemplateHandler(BodyHandler):
    """``{"messages": [...]}`` (as for chat completions) -> ``{"prompt": "..."}``,
    the text the model's chat template makes of them."""

    async def post(self) -> None:
        body = self.parse_body()
        obj(body, "body")
        request = parse_chat_request({"messages": body.get("messages"), "tools": body.get("tools"),
                                      "chat_template_kwargs": body.get("chat_template_kwargs")}, None)
        try:
            self.choose_model(body)
            # in the queue's turn: rendering sets MNN's template config, which a generation on the model reads
            async with self.exclusive_turn() as engine:
                llm = engine.loaded_model
                prompt = await asyncio.wrap_future(self.ctx.text_work.submit(
                    lambda: llm.apply_chat_template(request.messages, True, request.enable_thinking, request.tools)))
        finally:
            request.cleanup()
        self.send_json({"prompt": prompt})


class TokenizerInfoHandler(BodyHandler):
    """``GET /tokenizer_info[?model=...]`` (vLLM's): the tokenizer's ``eos_token``, ``bos_token``,
    ``chat_template`` and ``model_max_length`` (``Llm.tokenizer_info``)."""

    async def get(self) -> None:
        self.choose_model({"model": self.get_query_argument("model", None)})
        async with self.leased() as engine:
            info = engine.loaded_model.tokenizer_info()
        self.send_json({"tokenizer_class": "MNN", **info})


def routes(ctx: Any) -> list[tuple[str, type, dict[str, Any]]]:
    return [(r"/tokenize", TokenizeHandler, {"ctx": ctx}), (r"/detokenize", DetokenizeHandler, {"ctx": ctx}),
            (r"/tokenizer_info", TokenizerInfoHandler, {"ctx": ctx}),
            (r"/apply-template", ApplyTemplateHandler, {"ctx": ctx})]

