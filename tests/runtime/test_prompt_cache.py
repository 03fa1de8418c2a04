"""The prompt (KV) cache, on by default: what it reuses, when it must not,
and that it changes nothing: with MNN's rows batch-independent (our patch,
``Llm.batch_exact``) any shared prefix is kept, the previous answer's tokens
included; without, prompts are prefilled in chunks aligned to fixed
positions and only whole chunks are kept. Either way greedy outputs and
their log-probabilities with the cache equal those without it, bit for bit,
over every kind of conversation edit, split at whatever point the edit
leaves."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support import test_model_dir

from mnn_engine import Llm, MnnEngineError, _mnn

USER_TEXTS = ["Tell me about the sea.", "Why?", "And the mountains?", "Say it in French.", "ok", "What is 2+2?",
              "Write a haiku about rain.", "Hm."]
SYSTEMS = ["You are brief.", "Be kind and helpful.", "Answer like a pirate."]


def kept(llm: Llm, common: int, prompt: int) -> int:
    """What the cache keeps of a shared prefix, one token left to prefill:
    all of it where MNN is batch-exact, else whole prefill chunks."""
    if llm.batch_exact:
        return min(common, prompt - 1)
    chunk = _mnn.prefill_chunk()
    return min(common, prompt - 1) // chunk * chunk


def shared(a, b) -> int:
    return sum(1 for _ in itertools.takewhile(lambda pair: pair[0] == pair[1], zip(a, b, strict=False)))


def held_ids(llm: Llm) -> list[int]:
    return llm._core.held_ids()


@pytest.fixture(scope="module")
def fresh_models():
    """Second instances that never reuse a cache: the reference."""
    models = {}
    yield lambda name: models.setdefault(name, Llm(test_model_dir(name), thread_num=2, prompt_cache=False).load())
    for llm in models.values():
        llm.close()


def test_on_by_default(tiny):
    chat = [{"role": "user", "content": "Tell me about the sea. " * 20}]
    assert tiny.prompt_cache is True
    tiny.generate(chat, temperature=0, max_tokens=5)
    n = len(tiny.prompt_ids(chat))
    assert tiny.generate(chat, temperature=0, max_tokens=5).cached_tokens == kept(tiny, n, n) > 0


def test_turns_reuse_the_history(smollm):
    conversation = [{"role": "system", "content": "You are brief."}]
    smollm.forget_prompt_cache()
    reused_answers = 0
    for turn in range(4):
        conversation.append({"role": "user", "content": USER_TEXTS[turn] * 5})
        before = held_ids(smollm)
        result = smollm.generate(conversation, temperature=0, max_tokens=12)
        if turn:  # what the cache held of the last turn: its prompt, and (exact) its answer
            expected = kept(smollm, shared(before, result.prompt_ids), result.prompt_tokens)
            assert result.cached_tokens == expected
            assert result.usage["prompt_tokens_details"]["cached_tokens"] == expected
            reused_answers += result.cached_tokens > len(smollm.prompt_ids(conversation[:-2]))
        held = held_ids(smollm)
        if smollm.batch_exact:  # the prompt, then the answer's tokens whose KV was computed
            assert held[:result.prompt_tokens] == list(result.prompt_ids)
            assert held[result.prompt_tokens:] == list(result.token_ids[:len(held) - result.prompt_tokens])
            assert len(result.token_ids) - 1 <= len(held) - result.prompt_tokens <= len(result.token_ids)
        else:
            assert held == list(result.prompt_ids)
        conversation.append({"role": "assistant", "content": result.text})
    # the chat template re-tokenises an answer to the ids generated: its KV is reused
    assert reused_answers == (3 if smollm.batch_exact else 0)


EDITS = st.sampled_from(["append", "append", "regenerate", "edit_earlier", "drop_oldest", "system", "thinking"])


@pytest.mark.parametrize("model", ["tiny", "smollm2-135m"])
@settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_greedy_outputs_with_the_cache_equal_those_without(request, fresh_models, model, data):
    llm = request.getfixturevalue("tiny" if model == "tiny" else "smollm")
    fresh = fresh_models(model)
    llm.forget_prompt_cache()
    chat = [{"role": "system", "content": data.draw(st.sampled_from(SYSTEMS))}]
    thinking = None
    previous: tuple[int, ...] = ()  # the prompt the cache holds
    for _ in range(6):
        edit = data.draw(EDITS)
        users = [i for i, m in enumerate(chat) if m["role"] == "user"]
        if edit == "append" or not users:
            chat.append({"role": "user", "content": data.draw(st.sampled_from(USER_TEXTS)) * 3})
        elif edit == "regenerate" and chat[-1]["role"] == "assistant":
            chat.pop()
        elif edit == "edit_earlier":
            chat[users[0]] = {"role": "user", "content": data.draw(st.sampled_from(USER_TEXTS))}
            del chat[users[0] + 1:]
        elif edit == "drop_oldest" and len(users) > 1:
            del chat[1:users[1]]
        elif edit == "system":
            chat[0] = {"role": "system", "content": data.draw(st.sampled_from(SYSTEMS))}
        elif edit == "thinking" and model == "tiny":
            thinking = not thinking
        if chat[-1]["role"] != "user":
            chat.append({"role": "user", "content": "Go on."})
        kwargs = {"temperature": 0, "max_tokens": 8, "logprobs": True, "top_logprobs": 3}
        if model == "tiny":
            kwargs["enable_thinking"] = thinking
        cached = llm.generate(chat, **kwargs)
        reference = fresh.generate(chat, **kwargs)
        assert reference.cached_tokens == 0
        assert cached.token_ids == reference.token_ids
        assert [(e.logprob, e.top) for e in cached.logprobs] == [(e.logprob, e.top) for e in reference.logprobs]
        # exactly what the cache can keep of what it holds: the shared prefix (in whole chunks unless exact)
        assert cached.cached_tokens == kept(llm, shared(previous, cached.prompt_ids), len(cached.prompt_ids))
        previous = held_ids(llm)
        chat.append({"role": "assistant", "content": cached.text})


def test_regenerating_keeps_whole_chunks_and_prefills_the_rest(tiny):
    chat = [{"role": "user", "content": "Tell me about the sea. " * 30}]
    tiny.generate(chat, temperature=0, max_tokens=5, cache_prompt=True)
    again = tiny.generate(chat, temperature=0, max_tokens=5, cache_prompt=True)
    n = len(tiny.prompt_ids(chat))
    assert again.cached_tokens == kept(tiny, n, n) and n - again.cached_tokens <= _mnn.prefill_chunk()


@pytest.mark.parametrize("ending", ["stop_string", "max_tokens", "cancel", "callback_error"])
def test_every_way_a_generation_ends_keeps_a_usable_cache(tiny, ending):
    chat = [{"role": "user", "content": "Tell me about the sea. " * 20}]
    kw = {"temperature": 0, "cache_prompt": True}
    if ending == "stop_string":
        first = tiny.generate(chat, max_tokens=20, **kw)
        tiny.generate(chat, max_tokens=20, stop=[first.text[3:6] or "x"], **kw)
    elif ending == "max_tokens":
        tiny.generate(chat, max_tokens=3, **kw)
    elif ending == "cancel":
        def cancel_soon(piece):
            tiny.cancel()
        assert tiny.generate(chat, max_tokens=50, callback=cancel_soon, **kw).finish_reason == "cancelled"
    else:
        def fail(piece):
            raise RuntimeError("callback broke")
        with pytest.raises(RuntimeError):
            tiny.generate(chat, max_tokens=50, callback=fail, **kw)
    held = held_ids(tiny)
    prompt = tiny.prompt_ids(chat)
    assert held[:len(prompt)] == prompt and (tiny.batch_exact or held == prompt)
    longer = [*chat, {"role": "assistant", "content": "The sea."}, {"role": "user", "content": "More?"}]
    result = tiny.generate(longer, max_tokens=8, **kw)
    expected = kept(tiny, shared(held, result.prompt_ids), result.prompt_tokens)
    assert result.cached_tokens == expected > 0 and result.finish_reason in ("stop", "length")


@pytest.mark.parametrize("other", ["score", "mnn_response", "failure", "forget"])
def test_what_clears_the_cache(tiny, other):
    chat = [{"role": "user", "content": "Tell me about the sea. " * 20}]
    tiny.generate(chat, temperature=0, max_tokens=5, cache_prompt=True)
    assert tiny.held_tokens > 0
    if other == "score":
        tiny.score(chat, "some words")
    elif other == "mnn_response":
        tiny.mnn_response(tiny.prompt_ids(chat), 4)
    elif other == "failure":
        tiny._inject_failure(2)
        assert tiny.generate(chat, temperature=0, max_tokens=10).finish_reason == "error"
    else:
        tiny.forget_prompt_cache()
    assert tiny.held_tokens == 0
    after = tiny.generate(chat, temperature=0, max_tokens=5, cache_prompt=True, logprobs=True)
    fresh = tiny.generate(chat, temperature=0, max_tokens=5, cache_prompt=False, logprobs=True)
    assert after.cached_tokens == 0
    assert [e.logprob for e in after.logprobs] == [e.logprob for e in fresh.logprobs]  # nothing reused: exact


def test_tokenizer_calls_leave_the_cache_alone(tiny):
    chat = [{"role": "user", "content": "Tell me about the sea."}]
    tiny.generate(chat, temperature=0, max_tokens=5, cache_prompt=True)
    held = tiny.held_tokens
    tiny.tokenize("words " * 50)
    tiny.apply_chat_template(chat)
    tiny.detokenize([1, 2, 3])
    assert tiny.held_tokens == held


def test_prompt_cache_off_for_a_model(tiny):
    chat = [{"role": "user", "content": "Tell me about the sea. " * 20}]
    tiny.prompt_cache = False
    try:
        tiny.generate(chat, temperature=0, max_tokens=5)
        assert tiny.generate(chat, temperature=0, max_tokens=5).cached_tokens == 0
        assert tiny.generate(chat, temperature=0, max_tokens=5, cache_prompt=True).cached_tokens > 0
    finally:
        tiny.prompt_cache = True
    with pytest.raises(MnnEngineError):
        tiny.generate(chat, cache_prompt="yes")


def test_a_prefill_cancelled_between_chunks_leaves_its_chunks_to_reuse(tiny, fresh_models):
    """The cancel is asked for before the first chunk (``on_prompt``): the
    prefill stops after it. With exact reuse the cache then holds that chunk's
    tokens and the next run keeps them; without, it names the prompt, which
    MNN's KV does not wholly hold, so nothing is kept. Either way the answer is
    the fresh one."""
    chat = [{"role": "user", "content": "Tell me about the sea. " * 120}]
    tiny.forget_prompt_cache()
    run = tiny.prepare(chat, temperature=0, max_tokens=4, logprobs=True)
    assert run.run(on_prompt=lambda text, dropped, tokens: tiny.cancel()).finish_reason == "cancelled"
    chunk = _mnn.prefill_chunk(tiny.batch_exact)
    assert held_ids(tiny) == (tiny.prompt_ids(chat)[:chunk] if tiny.batch_exact else tiny.prompt_ids(chat))
    again = tiny.generate(chat, temperature=0, max_tokens=4, logprobs=True)
    reference = fresh_models("tiny").generate(chat, temperature=0, max_tokens=4, logprobs=True)
    assert again.cached_tokens == (chunk if tiny.batch_exact else 0)
    assert again.token_ids == reference.token_ids
    assert [(e.logprob, e.top) for e in again.logprobs] == [(e.logprob, e.top) for e in reference.logprobs]
