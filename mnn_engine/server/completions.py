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
        body = self.parse_body()
        model = self.choose_model(body)
        request = parse_completion_request(body)
        completion = TextCompletion(model=model, fingerprint=self.ctx.fingerprint)
        prefix = ""

        def echoed() -> str:  # the prompt as text, once the model is there (echo)
            if not request.echo:
                return ""
            assert self.engine is not None
            return request.prompt if isinstance(request.prompt, str) else self.engine.llm.detokenize(request.prompt)

        session = GenerationSession(self, request.prompt, parse=False, **request.sampling)
        if not request.stream:
            outcome = await session.whole()
            if outcome is not None:
                result = outcome.result
                prefix = echoed()
                self.send_json(completion.envelope(prefix + result.text, finish_reason(result),
                                                   legacy_logprobs(result.logprobs, outcome.token_bytes, len(prefix)),
                                                   usage=legacy_usage(result)))
            return

        async def start() -> None:
            nonlocal prefix
            prefix = echoed()
            self.start_events()
            if prefix:
                await self.send_event(completion.envelope(prefix, None))

        async def emit(deltas: list[Delta]) -> None:
            for delta in deltas:
                await self.send_event(completion.envelope(delta.text, None))

        outcome = await session.stream(start, emit, self.send_error_event)
        if outcome is not None:
            result = outcome.result
            logprobs = legacy_logprobs(result.logprobs, outcome.token_bytes, len(prefix))
            await self.send_event(completion.envelope("", finish_reason(result), logprobs))
            if request.include_usage:
                chunk = completion.envelope("", None, usage=legacy_usage(result))
                chunk["choices"] = []
                await self.send_event(chunk)
        self.end_events()


