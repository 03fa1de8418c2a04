"""``POST /v1/completions``: OpenAI's legacy text completions. The prompt is
text or token ids, used as is (no chat template), or a list of those (a
choice each, by ``index``, run in turn in the request's one queue slot);
streamed (SSE) or not; ``logprobs`` in the legacy shape; ``echo`` puts the
prompt before the answer, and with ``logprobs`` gives the prompt tokens'
log-probabilities too (scored as ``Llm.score`` does; ``max_tokens: 0``: the
scores only), what evaluation harnesses such as lm-eval ask for."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from ..api.completions import (
    CompletionRequest,
    TextCompletion,
    choice,
    echoed_logprobs,
    joined_logprobs,
    legacy_logprobs,
    legacy_usage,
    parse_completion_request,
)
from ..api.openai_chat import Delta, finish_reason
from ..errors import MnnEngineError
from ..runtime.generation import ScoreResult
from .app import BodyHandler
from .session import GenerationSession


@dataclass
class _Echo:
    """The echoed prompt: its text, its log-probabilities (when asked for) and its token count (0 where the
    generation counts the prompt)."""

    text: str = ""
    logprobs: dict[str, Any] | None = None
    tokens: int = 0


@dataclass
class _Answer:
    """One prompt's choice."""

    text: str
    finish_reason: str | None
    logprobs: dict[str, Any] | None
    prompt_tokens: int
    completion_tokens: int


class CompletionsHandler(BodyHandler):
    async def post(self) -> None:
        body = self.parse_body()
        model = self.choose_model(body)
        request = parse_completion_request(body)
        completion = TextCompletion(model=model, fingerprint=self.ctx.fingerprint)
        several = len(request.prompts) > 1 or any(request.reads_prompt(p) for p in request.prompts)
        if several and self.ctx.queue is not None:
            # a list of prompts, or a prompt read (and scored) before its answer, is one queue slot
            self.ctx.queue.keep_turn(self)
        if request.stream:
            await self._stream(request, completion)
            return
        answers: list[_Answer] = []
        for prompt in request.prompts:
            answer = await self._whole(request, prompt)
            if answer is None:
                return  # the client left
            answers.append(answer)
            self._between_prompts()
        self.send_json(completion.of_choices(
            [choice(a.text, a.finish_reason, a.logprobs, index) for index, a in enumerate(answers)],
            usage=legacy_usage(sum(a.prompt_tokens for a in answers), sum(a.completion_tokens for a in answers))))

    def _between_prompts(self) -> None:
        """The model's lease goes back between a request's generations (each takes its own; the turn
        is kept)."""
        self.release_model()

    async def echo(self, request: CompletionRequest, prompt: str | list[int]) -> _Echo | None:
        """The prompt to echo (nothing without ``echo``), scored when its log-probabilities are asked for
        (None: the client left). Where it needs the model (``reads_prompt``) it takes the request's turn,
        kept for the answer; text echoed as it is needs nothing."""
        if not request.echo:
            return _Echo()
        if not request.reads_prompt(prompt):
            return _Echo(prompt)  # text, answered after it: the generation counts its tokens
        top = request.prompt_logprobs
        async with self.generation_turn() as engine:
            llm = engine.loaded_model
            ids = prompt if isinstance(prompt, list) else \
                await self.off_loop(lambda: llm.tokenize(prompt, limit=llm.context_length))
            text = prompt if isinstance(prompt, str) else await self.off_loop(llm.detokenize, prompt)
            scored: ScoreResult | None = None
            if top is not None and len(ids) > 1:
                self.generation = engine.submit_score(ids[:1], ids[1:], top_logprobs=top)
                scored = await asyncio.wrap_future(self.generation)
                if self.closed:
                    return None
                if scored.cancelled:
                    raise self.cancelled_error()
            logprobs = None if top is None else echoed_logprobs(ids, scored, llm.token_bytes)
        self._between_prompts()
        return _Echo(text, logprobs, len(ids))

    async def _whole(self, request: CompletionRequest, prompt: str | list[int]) -> _Answer | None:
        echo = await self.echo(request, prompt)
        if echo is None:
            return None
        if not request.generate:
            return _Answer(echo.text, "length", echo.logprobs, echo.tokens, 0)
        outcome = await GenerationSession(self, prompt, parse=False, **request.sampling).whole()
        if outcome is None:
            return None
        result = outcome.result
        logprobs = legacy_logprobs(result.logprobs, outcome.token_bytes, len(echo.text))
        return _Answer(echo.text + result.text, finish_reason(result), joined_logprobs(echo.logprobs, logprobs),
                       result.prompt_tokens, result.completion_tokens)

    async def _stream(self, request: CompletionRequest, completion: TextCompletion) -> None:
        stream = _Stream(self, request, completion)
        for index, prompt in enumerate(request.prompts):
            try:
                going = await stream.choice(prompt, index)
            except MnnEngineError as exc:
                if not stream.started:
                    raise  # the first prompt's refusals are plain HTTP errors
                await self.send_error_event(exc)  # the stream has started: the error goes in it
                going = False
            if not going:
                break
            self._between_prompts()
        else:
            if request.include_usage:
                chunk = completion.envelope("", None, usage=legacy_usage(*stream.usage))
                chunk["choices"] = []
                await self.send_event(chunk)
        self.end_events()


class _Stream:
    """A streamed completion: each prompt's choice in turn, by ``index``; the usage adds up."""

    def __init__(self, handler: CompletionsHandler, request: CompletionRequest, completion: TextCompletion) -> None:
        self.handler, self.request, self.completion = handler, request, completion
        self.started = False
        self.usage = [0, 0]

    async def choice(self, prompt: str | list[int], index: int) -> bool:
        """Stream one prompt's choice; False when the stream ended early (a failure, the client gone)."""
        handler, request, completion = self.handler, self.request, self.completion
        echo = await handler.echo(request, prompt)
        if echo is None:
            return False

        async def start() -> None:
            if not self.started:
                handler.start_events()
                self.started = True
            if echo.text:
                await handler.send_event(completion.envelope(echo.text, None, index=index))

        if not request.generate:
            await start()
            await handler.send_event(completion.envelope("", "length", echo.logprobs, index=index))
            self.usage[0] += echo.tokens
            return True

        async def emit(deltas: list[Delta]) -> None:
            for delta in deltas:
                await handler.send_event(completion.envelope(delta.text, None, index=index))

        session = GenerationSession(handler, prompt, parse=False, **request.sampling)
        outcome = await session.stream(start, emit, handler.send_error_event)
        if outcome is None:
            return False
        result = outcome.result
        logprobs = legacy_logprobs(result.logprobs, outcome.token_bytes, len(echo.text))
        await handler.send_event(completion.envelope("", finish_reason(result),
                                                     joined_logprobs(echo.logprobs, logprobs), index=index))
        self.usage[0] += result.prompt_tokens
        self.usage[1] += result.completion_tokens
        return True
