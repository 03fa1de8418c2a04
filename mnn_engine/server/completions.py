"""``POST /v1/completions``: OpenAI's legacy text completions. The prompt is
text or token ids, used as is (no chat template); streamed (SSE) or not;
``logprobs`` in the legacy shape; ``echo`` puts the prompt before the answer."""

from __future__ import annotations

from ..api.completions import TextCompletion, legacy_logprobs, legacy_usage, parse_completion_request
from ..api.openai_chat import Delta, finish_reason
from .app import BodyHandler
from .session import GenerationSession


class CompletionsHandler(BodyHandler):
    async def post(self) -> None:
        model = self.require_model()
        request = parse_completion_request(self.parse_body())
        llm = self.ctx.engine.llm
        completion = TextCompletion(model=model, fingerprint=self.ctx.fingerprint)
        prefix = ""
        if request.echo:
            prefix = request.prompt if isinstance(request.prompt, str) else llm.detokenize(request.prompt)
        session = GenerationSession(self, request.prompt, parse=False, **request.sampling)
        if not request.stream:
            outcome = await session.whole()
            if outcome is not None:
                result = outcome.result
                self.send_json(completion.envelope(prefix + result.text, finish_reason(result),
                                                   legacy_logprobs(result.logprobs, llm.token_bytes, len(prefix)),
                                                   usage=legacy_usage(result)))
            return

        async def start() -> None:
            self.start_events()
            if prefix:
                await self.send_event(completion.envelope(prefix, None))

        async def emit(deltas: list[Delta]) -> None:
            for delta in deltas:
                await self.send_event(completion.envelope(delta.text, None))

        outcome = await session.stream(start, emit, self.send_error_event)
        if outcome is not None:
            result = outcome.result
            logprobs = legacy_logprobs(result.logprobs, llm.token_bytes, len(prefix))
            await self.send_event(completion.envelope("", finish_reason(result), logprobs))
            if request.include_usage:
                chunk = completion.envelope("", None, usage=legacy_usage(result))
                chunk["choices"] = []
                await self.send_event(chunk)
        self.end_events()


