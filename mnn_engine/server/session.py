"""One generation of an HTTP route, whatever the dialect.

Chat completions, completions, Ollama's chat and generate all go through
``GenerationSession``: it takes the queue turn, submits the generation, waits
for the first piece (so a refusal or a failure before any text is still a
plain HTTP error), cancels the generation when the client leaves, parses the
output (reasoning, content, tool calls), and turns a failure after the
answer has started into the dialect's in-stream error frame. Each dialect
only formats: it passes the callbacks that write its own frames.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from concurrent.futures import Future
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..api.openai_chat import ChatRequest, Delta, OutputParser, prompt_opens_thinking
from ..errors import MnnEngineError
from ..runtime import structured
from ..runtime.generation import GenerationResult
from ..runtime.streaming import astream_pieces


class SessionHandler(Protocol):
    """What a session needs of its route's handler (``app.BodyHandler`` has it)."""

    ctx: Any
    generation: Any
    closed: bool

    def generation_turn(self) -> AbstractAsyncContextManager[Any]: ...

    def end_turn(self) -> None: ...

    def release_model(self) -> None: ...

    def gone(self) -> bool: ...

    async def first_piece(self, pieces: Any) -> str | None: ...

    def check_not_cancelled(self, result: GenerationResult) -> None: ...


#: a dialect's writer of parsed output, and of an error once the answer has started
Emit = Callable[[list[Delta]], Awaitable[None]]
EmitError = Callable[[MnnEngineError], Awaitable[None]]


@dataclass
class Outcome:
    """A finished generation: the result, its parsed output, what the parser saw."""

    result: GenerationResult
    deltas: list[Delta] = field(default_factory=list)  # for whole answers; streams emitted theirs
    parser: OutputParser | None = None
    dropped: int = 0  # messages dropped to fit the context
    token_bytes: Any = None  # the model's token -> bytes (Llm.token_bytes), for logprobs

    @property
    def tool_calls(self) -> bool:
        return bool(self.parser is not None and self.parser.tool_calls)


class _Gone:
    """A cancel flag for work on another thread: set once the request's client left."""

    def __init__(self, handler: SessionHandler) -> None:
        self.handler = handler

    def is_set(self) -> bool:
        return self.handler.gone()


class GenerationSession:
    """``prompt`` and ``options`` go to ``engine.submit``; ``parse`` splits
    reasoning and tool calls out of the text (False: the text as content)."""

    def __init__(self, handler: SessionHandler, prompt: Any, *, parse: bool = True, parse_tools: bool = False,
                 stream_tool_arguments: bool = False, **options: Any) -> None:
        self.handler = handler
        self.prompt, self.options = prompt, options
        self.parse, self.parse_tools = parse, parse_tools
        #: streamed, a tool call goes out piece by piece (OpenAI's deltas); else whole when it ends
        self.stream_tool_arguments = stream_tool_arguments
        #: (prompt text, messages dropped, prompt tokens), from the generation thread
        self._rendered: list[tuple[str | None, int, int]] = []

    @classmethod
    def of_chat(cls, handler: SessionHandler, request: ChatRequest, prompt: Any = None, *,
                stream_tool_arguments: bool = True, **options: Any) -> GenerationSession:
        """The session of a chat request (its messages, or ``prompt``; its tools, thinking switch and
        sampling; ``options`` beside them): what every chat-shaped route generates from."""
        return cls(handler, request.messages if prompt is None else prompt, parse_tools=request.parse_tools,
                   stream_tool_arguments=stream_tool_arguments, enable_thinking=request.enable_thinking,
                   tools=request.tools, tool_choice=request.tool_choice, **request.sampling, **options)

    def _submit(self, engine: Any, put: Callable[[str], None] | None) -> Future[GenerationResult]:
        handler = self.handler
        handler.generation = engine.submit(self.prompt, put, on_prompt=lambda *p: self._rendered.append(p),
                                           **self.options)
        return handler.generation

    def _parser(self, streamed: bool = False) -> OutputParser | None:
        if not self.parse:
            return None
        text = self._rendered[0][0] if self._rendered else None
        return OutputParser(in_reasoning=prompt_opens_thinking(text or ""), parse_tools=self.parse_tools,
                            stream_arguments=streamed and self.stream_tool_arguments)

    @property
    def dropped(self) -> int:
        return self._rendered[0][1] if self._rendered else 0

    @property
    def prompt_tokens(self) -> int:
        """The prompt's token count, once the generation has rendered it (0 before)."""
        return self._rendered[0][2] if self._rendered else 0

    @staticmethod
    def _feed(parser: OutputParser | None, text: str) -> list[Delta]:
        if parser is None:
            return [Delta("content", text)] if text else []
        return parser.feed(text)

    async def _check_grammar(self) -> None:
        """A grammar the sandbox has not judged yet is checked outside the generation turn: its
        check (up to a minute, in the sandbox's child) once held the one turn, and every plain chat
        waited it out, even after its client left. The turn is taken only to reach the model's
        vocabulary, then given back; the check stops when the client leaves."""
        options = self.options
        if options.get("response_format") is None and options.get("grammar") is None and \
                structured.tool_choice_name(options.get("tool_choice")) is False:
            return
        handler = self.handler
        async with handler.generation_turn() as engine:
            model = engine.loaded_model
            check = await asyncio.wrap_future(handler.ctx.text_work.submit(structured.pending_check, model, options))
        handler.end_turn()
        handler.release_model()  # leased again with the turn below
        if check is not None:
            await asyncio.wrap_future(handler.ctx.grammar_checks.submit(check, _Gone(handler)))

    async def whole(self) -> Outcome | None:
        """The whole answer (None: the client left before it was done)."""
        handler = self.handler
        await self._check_grammar()
        async with handler.generation_turn() as engine:
            future = self._submit(engine, None)
            result = await asyncio.wrap_future(future)
            if handler.closed:
                return None
            handler.check_not_cancelled(result)
            parser = self._parser()
            deltas = self._feed(parser, result.text) + (parser.finish() if parser is not None else [])
            return Outcome(result, deltas, parser, self.dropped, engine.loaded_model.token_bytes)

    async def stream(self, start: Callable[[], Awaitable[None]], emit: Emit, emit_error: EmitError) -> Outcome | None:
        """Stream the answer: ``start()`` once the first piece is there (the
        headers and any opening frame), ``emit(deltas)`` as text comes, and on
        a failure after that ``emit_error(exc)`` (None is returned then)."""
        handler = self.handler
        await self._check_grammar()
        async with handler.generation_turn() as engine:
            pieces = astream_pieces(lambda put: self._submit(engine, put), engine.cancel_generation)
            first = await handler.first_piece(pieces)
            parser = self._parser(streamed=True)
            await start()
            try:
                if first is not None:
                    await emit(self._feed(parser, first))
                    async for piece in pieces:
                        await emit(self._feed(parser, piece))
                if parser is not None:
                    await emit(parser.finish())
                result = handler.generation.result()
                handler.check_not_cancelled(result)
            except MnnEngineError as exc:  # the status is sent: the dialect reports it in the stream
                await emit_error(exc)
                return None
            return Outcome(result, [], parser, self.dropped, engine.loaded_model.token_bytes)
