"""mnn_engine.Llm on the real MNN engine with generated models."""

from __future__ import annotations

import _thread
import asyncio
import json
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from support import QWEN_IM_END, SCRIPTED_TEXT, TOOLCALL_TEXT, cancelling, test_model_dir

from mnn_engine import GenerationConfig, Llm, MnnEngineError

LONG = {"ignore_eos": True, "max_tokens": 400, "temperature": 0}


# ---------------------------------------------------------------- the scripted sentence
def test_scripted_sentence_through_callback(scripted, chat):
    pieces: list[str] = []
    result = scripted.generate(chat, callback=pieces.append, temperature=0)
    assert result.text == SCRIPTED_TEXT
    assert "".join(pieces) == SCRIPTED_TEXT
    assert "🪿" in pieces  # three byte-level tokens arrive as one whole character
    assert all("\ufffd" not in p for p in pieces)
    assert result.finish_reason == "stop"
    assert result.completion_tokens == len(result.token_ids) == 17
    assert QWEN_IM_END not in result.token_ids


def test_scripted_sentence_through_stream(scripted, chat):
    pieces = list(scripted.stream(chat, temperature=0))
    assert "".join(pieces) == SCRIPTED_TEXT
    assert scripted.last_result is not None
    assert scripted.last_result.finish_reason == "stop"


def test_scripted_sentence_through_astream(scripted, chat):
    async def collect():
        return [piece async for piece in scripted.astream(chat, temperature=0)]

    pieces = asyncio.run(collect())
    assert "".join(pieces) == SCRIPTED_TEXT


def test_astream_does_not_block_the_event_loop(tiny, chat):
    async def main():
        ticks = 0
        stop = asyncio.Event()

        async def ticker():
            nonlocal ticks
            while not stop.is_set():
                ticks += 1
                await asyncio.sleep(0)

        task = asyncio.create_task(ticker())
        pieces = [p async for p in tiny.astream(chat, **LONG)]
        stop.set()
        await task
        return ticks, pieces

    ticks, pieces = asyncio.run(main())
    assert len(pieces) > 0
    assert ticks > len(pieces)


def test_result_stats(scripted, chat):
    scripted.forget_prompt_cache()  # (any earlier test's shared prefix would be reused)
    result = scripted.generate(chat, temperature=0, speculative="off")
    assert result.prompt_tokens == len(scripted.prompt_ids(chat))
    assert 0 < result.prefill_ms <= result.time_to_first_token_ms <= result.total_ms
    assert result.decode_ms > 0 and result.decode_steps == result.completion_tokens
    assert 0 < result.decode_forward_ms < result.decode_ms  # MNN's forwards; the rest is our loop
    assert result.decode_tokens_per_second > 0 and result.prefill_tokens_per_second > 0
    assert result.usage == {"prompt_tokens": result.prompt_tokens, "completion_tokens": 17,
                            "total_tokens": result.prompt_tokens + 17,
                            "prompt_tokens_details": {"cached_tokens": 0},
                            "completion_tokens_details": {"accepted_prediction_tokens": 0,
                                                          "rejected_prediction_tokens": 0},
                            "speculative": {"drafted_tokens": result.drafted_tokens,
                                            "accepted_tokens": result.accepted_tokens}}


# ---------------------------------------------------------------- determinism and seeds
def test_a_generation_cancelled_before_its_prefill_is_the_loops_empty_outcome(scripted, chat):
    from mnn_engine import GenerationConfig, _mnn
    from mnn_engine.runtime.generation import GenerationResult

    settings = GenerationConfig(temperature=0).resolved(scripted.sampling_defaults, scripted.vocab_size)
    settings.max_tokens = 2
    with scripted.claim() as claim:
        native = claim.core.generate(scripted.prompt_ids(chat), settings)
    assert isinstance(native, _mnn.GenerationOutcome) and native.completion_tokens == 2
    cancelled = GenerationResult.from_outcome(_mnn.GenerationOutcome(), seed=7)
    assert cancelled.finish_reason == "cancelled" and cancelled.text == "" and cancelled.token_ids == ()
    assert cancelled.logprobs is None and cancelled.usage["total_tokens"] == 0 and cancelled.error is None


def test_native_settings_refuse_an_unknown_name_where_it_is_set(scripted):
    from mnn_engine import GenerationConfig

    settings = GenerationConfig(temperature=0.5, stop=["END"]).resolved({}, scripted.vocab_size)
    settings.stop = ("END", "ÉTÉ")
    assert settings.stop == ("END", "ÉTÉ") and settings.temperature == 0.5
    with pytest.raises(AttributeError):
        settings.max_token = 3  # a typo: refused here, not a KeyError on the generation thread


def test_greedy_is_deterministic(tiny, chat):
    first = tiny.generate(chat, temperature=0, max_tokens=24, ignore_eos=True)
    second = tiny.generate(chat, temperature=0, max_tokens=24, ignore_eos=True)
    assert first.token_ids == second.token_ids


def test_seed_reproduces_a_sample_and_seeds_differ(tiny, chat):
    options = {"temperature": 1.5, "top_k": 0, "top_p": 1.0, "min_p": 0.0, "max_tokens": 24, "ignore_eos": True}
    a = tiny.generate(chat, seed=1234, **options)
    b = tiny.generate(chat, seed=1234, **options)
    c = tiny.generate(chat, seed=4321, **options)
    assert a.token_ids == b.token_ids and a.text == b.text
    assert a.seed == 1234
    assert a.token_ids != c.token_ids


def test_unseeded_samples_report_their_seed(tiny, chat):
    options = {"temperature": 1.5, "max_tokens": 16, "ignore_eos": True}
    a = tiny.generate(chat, **options)
    again = tiny.generate(chat, seed=a.seed, **options)
    assert again.token_ids == a.token_ids


# ---------------------------------------------------------------- stopping
@pytest.mark.parametrize(
    ("stop", "expected"),
    [
        (["tiny"], "Hello! I am a "),
        (["I am"], "Hello! "),  # spans two tokens
        (["你"], "Hello! I am a tiny MNN test model, "),  # part of a multi-char token
        (["🪿"], "Hello! I am a tiny MNN test model, 你好 "),  # split over three tokens
        (["nothing like it", "model,"], "Hello! I am a tiny MNN test "),
        (["Hello"], ""),
        (["never appears"], SCRIPTED_TEXT),
    ],
)
def test_stop_strings_cut_exactly(scripted, chat, stop, expected):
    pieces: list[str] = []
    result = scripted.generate(chat, callback=pieces.append, temperature=0, stop=stop)
    assert result.text == expected
    assert "".join(pieces) == expected
    assert result.finish_reason == "stop"


def test_max_tokens_gives_length(scripted, chat):
    result = scripted.generate(chat, temperature=0, max_tokens=3)
    assert result.finish_reason == "length"
    assert result.completion_tokens == 3
    assert result.text == "Hello! I"


def test_context_limit_gives_length(tmp_path):
    llm = Llm(test_model_dir("tiny"), thread_num=2, max_all_tokens=64).load()
    try:
        result = llm.generate("Hi", temperature=0, ignore_eos=True)
        assert result.finish_reason == "length"
        assert result.prompt_tokens + result.completion_tokens == 64
        with pytest.raises(MnnEngineError) as err:
            llm.generate("word " * 80)
        assert err.value.code == "context_length_exceeded"
    finally:
        llm.close()


def test_unlimited_max_tokens_stops_at_the_end_token(scripted, chat):
    for value in (None, -1):
        assert scripted.generate(chat, temperature=0, max_tokens=value).text == SCRIPTED_TEXT


# ---------------------------------------------------------------- cancellation
def test_cancel_from_another_thread_stops_within_one_token(tiny, scripted, chat):
    pieces: list[str] = []
    after_cancel: list[str] = []
    cancelled = threading.Event()

    def on_piece(piece: str) -> None:
        (after_cancel if cancelled.is_set() else pieces).append(piece)
        if len(pieces) == 5 and not cancelled.is_set():
            canceller = threading.Thread(target=tiny.cancel)
            canceller.start()
            canceller.join()
            cancelled.set()

    result = tiny.generate(chat, callback=on_piece, **LONG)
    assert result.finish_reason == "cancelled"
    assert len(after_cancel) <= 1
    assert result.completion_tokens <= 6
    # the model stays loaded and the next generation is complete
    assert tiny.is_loaded
    assert tiny.generate(chat, temperature=0, max_tokens=5).finish_reason == "length"


def test_cancel_while_streaming_from_another_thread(tiny, chat):
    with cancelling(tiny.cancel):
        pieces = list(tiny.stream(chat, **dict(LONG, max_tokens=100000)))
    assert tiny.last_result.finish_reason == "cancelled"
    assert len(pieces) < 100000


def test_callback_exception_propagates_and_model_survives(scripted, chat):
    class Boom(Exception):
        pass

    seen: list[str] = []

    def explode(piece: str) -> None:
        seen.append(piece)
        if len(seen) == 3:
            raise Boom("stop here")

    with pytest.raises(Boom):
        scripted.generate(chat, callback=explode, temperature=0)
    assert len(seen) == 3
    assert scripted.generate(chat, temperature=0).text == SCRIPTED_TEXT


def test_keyboard_interrupt_during_stream_cancels_cleanly(tiny, scripted, chat):
    started = threading.Event()

    def interrupt() -> None:
        started.wait(10)
        time.sleep(0.02)
        _thread.interrupt_main()

    # Python's own Ctrl-C handler, as in a terminal: a process a shell starts in the background inherits SIGINT
    # ignored, and interrupt_main() then does nothing
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    threading.Thread(target=interrupt, daemon=True).start()
    received = 0
    try:
        with pytest.raises(KeyboardInterrupt):
            for _ in tiny.stream(chat, **dict(LONG, max_tokens=100000)):
                received += 1
                started.set()
                time.sleep(0.01)  # a consumer at a terminal's pace: the interrupt lands while the generation runs
    finally:
        signal.signal(signal.SIGINT, previous)
    assert received > 0
    assert tiny.last_result.finish_reason == "cancelled"
    assert tiny.generate(chat, temperature=0, max_tokens=4).completion_tokens == 4


def test_breaking_out_of_a_stream_cancels_it(tiny, chat):
    for count, _ in enumerate(tiny.stream(chat, **dict(LONG, max_tokens=100000)), start=1):
        if count == 3:
            break
    assert tiny.last_result.finish_reason == "cancelled"


def test_one_generation_at_a_time(tiny, chat):
    gate = threading.Event()
    release = threading.Event()
    errors: list[MnnEngineError] = []

    def slow(piece: str) -> None:
        gate.set()
        release.wait(10)

    worker = threading.Thread(target=lambda: tiny.generate(chat, callback=slow, **dict(LONG, max_tokens=3)))
    worker.start()
    gate.wait(10)
    try:
        tiny.generate(chat, max_tokens=2)
    except MnnEngineError as exc:
        errors.append(exc)
    release.set()
    worker.join()
    assert [e.code for e in errors] == ["busy"]


def test_generation_releases_the_gil(tiny, chat):
    count = 0
    done = threading.Event()

    def counter() -> None:
        nonlocal count
        while not done.is_set():
            count += 1

    thread = threading.Thread(target=counter)
    thread.start()
    time.sleep(0.01)
    before = count
    result = tiny.generate(chat, **dict(LONG, max_tokens=200))  # no callback: never takes the GIL
    during = count - before
    done.set()
    thread.join()
    assert result.completion_tokens == 200
    # Holding the GIL for the whole loop would freeze the counter (a few
    # switch-interval slices at most); released, it counts all along.
    assert during > 20_000


# ---------------------------------------------------------------- real model
def test_smollm2_knows_the_capital_of_france(smollm):
    result = smollm.generate([{"role": "user", "content": "What is the capital of France?"}],
                             temperature=0, max_tokens=24)
    assert "Paris" in result.text


# ---------------------------------------------------------------- text utilities
def test_tokenize_detokenize_round_trip(scripted):
    text = "Grüße, 你好 🪿!"
    ids = scripted.tokenize(text)
    assert scripted.detokenize(ids) == text
    raw = [scripted.detokenize_bytes([i]) for i in ids]
    assert b"".join(raw) == text.encode()
    assert any(piece.decode("utf-8", "replace") != piece.decode("utf-8", "ignore") for piece in raw)


def test_chat_template_options(scripted):
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]
    plain = scripted.apply_chat_template(messages)
    assert plain.endswith("<|im_start|>assistant\n")
    assert "<think>" not in plain
    assert scripted.apply_chat_template(messages, enable_thinking=False).endswith("<think>\n\n</think>\n\n")
    assert scripted.apply_chat_template(messages) == plain  # options do not stick
    without = scripted.apply_chat_template(messages, add_generation_prompt=False)
    assert without == plain[: -len("<|im_start|>assistant\n")]
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
    with_tools = scripted.apply_chat_template(messages, tools=tools)
    assert "get_weather" in with_tools and "<tools>" in with_tools
    assert scripted.apply_chat_template(messages) == plain


def test_tool_call_model_says_its_tool_call(toolcall, chat):
    tools = [{"type": "function", "function": {"name": "get_weather"}}]
    result = toolcall.generate(chat, tools=tools, temperature=0)
    assert result.text == TOOLCALL_TEXT
    body = result.text.removeprefix("<tool_call>").removesuffix("</tool_call>")
    assert json.loads(body)["arguments"] == {"city": "Paris"}


def test_prompt_as_token_ids(scripted, chat):
    ids = scripted.prompt_ids(chat)
    assert scripted.generate(ids, temperature=0).text == SCRIPTED_TEXT


@pytest.mark.parametrize("option", [{"enable_thinking": False}, {"tools": [{"type": "function"}]}])
def test_template_options_need_chat_messages(scripted, chat, option):
    for prompt in ("hi", scripted.prompt_ids(chat)):
        with pytest.raises(MnnEngineError) as err:
            scripted.generate(prompt, **option)
        assert err.value.code == "invalid_argument" and err.value.param == next(iter(option))


def test_stream_raises_the_generation_error(scripted, chat):
    with pytest.raises(MnnEngineError) as err:
        list(scripted.stream(chat, temperature=-1))
    assert err.value.code == "invalid_argument"
    scripted._inject_failure(2)
    pieces = list(scripted.stream(chat, temperature=0))
    assert "".join(pieces) == "Hello!" and scripted.last_result.finish_reason == "error"


def test_logprobs(tiny, chat):
    result = tiny.generate(chat, temperature=0, max_tokens=6, ignore_eos=True, logprobs=True, top_logprobs=3)
    assert result.logprobs is not None and len(result.logprobs) == 6
    for entry, token in zip(result.logprobs, result.token_ids, strict=True):
        assert entry.token_id == token
        assert entry.logprob <= 0
        assert len(entry.top) == 3
        values = [lp for _, lp in entry.top]
        assert values == sorted(values, reverse=True)
        assert entry.top[0][0] == token  # greedy picks the most likely token
        assert entry.top[0][1] == pytest.approx(entry.logprob)
    assert tiny.generate(chat, max_tokens=2).logprobs is None


def test_penalties_change_a_repetitive_greedy_output(tiny, chat):
    plain = tiny.generate(chat, temperature=0, max_tokens=40, ignore_eos=True).token_ids
    assert len(set(plain)) < len(plain)  # the random model repeats itself
    penalised = tiny.generate(chat, temperature=0, max_tokens=40, ignore_eos=True, presence_penalty=2.0).token_ids
    repeated = tiny.generate(chat, temperature=0, max_tokens=40, ignore_eos=True, repetition_penalty=1e6).token_ids
    assert len(set(penalised)) > len(set(plain))
    assert len(set(repeated)) == len(repeated)  # every earlier token is pushed down


def test_generation_config_object(scripted, chat):
    config = GenerationConfig(temperature=0, max_tokens=2)
    assert scripted.generate(chat, config=config).completion_tokens == 2
    assert scripted.generate(chat, config=config, max_tokens=4).completion_tokens == 4


# ---------------------------------------------------------------- bad input
def test_missing_directory(tmp_path):
    with pytest.raises(MnnEngineError) as err:
        Llm(tmp_path / "nope")
    assert err.value.code == "model_not_found"


def _copy_model(name: str, dest: Path) -> Path:
    shutil.copytree(test_model_dir(name), dest)
    return dest


def test_config_without_llm_model(tmp_path):
    model = _copy_model("tiny", tmp_path / "m")
    config = json.loads((model / "config.json").read_text())
    del config["llm_model"]
    (model / "config.json").write_text(json.dumps(config))
    with pytest.raises(MnnEngineError) as err:
        Llm(model)
    assert err.value.code == "invalid_model"
    assert "llm_model" in err.value.message


def test_config_that_is_not_json(tmp_path):
    model = _copy_model("tiny", tmp_path / "m")
    (model / "config.json").write_text("{not json")
    with pytest.raises(MnnEngineError) as err:
        Llm(model)
    assert err.value.code == "invalid_model"


def test_truncated_weight_file(tmp_path):
    model = _copy_model("tiny", tmp_path / "m")
    weight = model / "llm.mnn.weight"
    with open(weight, "r+b") as f:
        f.truncate(weight.stat().st_size // 2)
    with pytest.raises(MnnEngineError) as err:
        Llm(model)
    assert err.value.code == "invalid_model"
    assert "llm.mnn.weight" in err.value.message and "truncated" in err.value.message


def test_missing_weight_file(tmp_path):
    model = _copy_model("tiny", tmp_path / "m")
    (model / "llm.mnn.weight").unlink()
    with pytest.raises(MnnEngineError) as err:
        Llm(model)
    assert err.value.code == "invalid_model"


def test_load_failure_has_mnn_message(tmp_path):
    model = _copy_model("tiny", tmp_path / "m")
    (model / "llm.mnn").write_bytes(b"\0" * 64)
    with pytest.raises(MnnEngineError) as err:
        Llm(model).load()
    assert err.value.code in {"invalid_model", "model_load_failed"}


@pytest.mark.parametrize(
    ("options", "param"),
    [
        ({"max_tokens": 0}, "max_tokens"),
        ({"max_tokens": -2}, "max_tokens"),
        ({"top_p": 0.0}, "top_p"),
        ({"top_p": 1.5}, "top_p"),
        ({"temperature": -0.1}, "temperature"),
        ({"top_k": -1}, "top_k"),
        ({"min_p": 2}, "min_p"),
        ({"logit_bias": {10**9: 1.0}}, "logit_bias"),
        ({"stop": [""]}, "stop"),
        ({"top_logprobs": 3}, "top_logprobs"),
        ({"not_an_option": 1}, "not_an_option"),
    ],
)
def test_bad_sampling_options(scripted, chat, options, param):
    with pytest.raises(MnnEngineError) as err:
        scripted.generate(chat, **options)
    assert err.value.code == "invalid_argument"
    assert err.value.param == param
    assert scripted.generate(chat, temperature=0).text == SCRIPTED_TEXT  # nothing lost


@pytest.mark.parametrize("prompt", ["", []])
def test_empty_prompt(scripted, prompt):
    with pytest.raises(MnnEngineError) as err:
        scripted.generate(prompt)
    assert err.value.code in {"empty_prompt", "invalid_argument"}


def test_bad_prompts(scripted):
    for prompt, code in [([-1], "invalid_argument"), ([10**9], "invalid_argument"),
                         ([{"role": "user"}, 3], "invalid_argument"), (b"bytes", "invalid_argument"),
                         ([{"role": "", "content": "x"}], "invalid_argument")]:
        with pytest.raises(MnnEngineError) as err:
            scripted.generate(prompt)
        assert err.value.code == code


def test_close_is_idempotent_and_final():
    llm = Llm(test_model_dir("tiny-scripted"), thread_num=1).load()
    llm.close()
    llm.close()
    with pytest.raises(MnnEngineError) as err:
        llm.generate("hi")
    assert err.value.code == "model_not_loaded"
    llm.load()  # can be loaded again
    assert llm.generate([{"role": "user", "content": "x"}], temperature=0).text == SCRIPTED_TEXT
    llm.close()



def test_close_from_inside_its_own_generation_callback_is_refused_not_a_hang():
    llm = Llm(test_model_dir("tiny-scripted"), thread_num=1).load()
    refused = []

    def callback(piece):
        try:
            llm.close()  # waits for this generation, which waits for this callback: refused at once
        except MnnEngineError as exc:
            refused.append(exc)

    done = []
    worker = threading.Thread(target=lambda: done.append(
        llm.generate([{"role": "user", "content": "x"}], temperature=0, callback=callback)))
    worker.start()
    worker.join(60)
    assert not worker.is_alive(), "close() inside the callback hung"
    assert refused and all(e.code == "invalid_argument" and "callback" in e.message for e in refused)
    assert done[0].text == SCRIPTED_TEXT  # the generation went on and the model is still loaded
    llm.close()  # after the generation returned: closes
    with pytest.raises(MnnEngineError) as err:
        llm.generate("hi")
    assert err.value.code == "model_not_loaded"


# ---------------------------------------------------------------- process-level behaviour
def _python(code: str, cwd: str = "/") -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True, timeout=120)


def test_mnn_prints_are_captured_into_logging():
    model = test_model_dir("tiny-scripted")
    code = (
        "import logging, sys\n"
        "logging.basicConfig(stream=sys.stderr, level=logging.INFO, format='LOG %(name)s %(message)s')\n"
        "from mnn_engine import Llm\n"
        f"llm = Llm({str(model)!r}).load()\n"
        "llm.generate('hi', max_tokens=2)\n"
        "print('ONLY THIS')\n"
    )
    proc = _python(code)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "ONLY THIS\n"
    assert "LOG mnn_engine.mnn" in proc.stderr
    assert "The device supports" not in proc.stdout


def test_import_from_outside_the_source_tree_and_exit_without_close():
    model = test_model_dir("tiny-scripted")
    proc = _python(
        "import mnn_engine, os; print(mnn_engine.__file__)\n"
        f"llm = mnn_engine.Llm({str(model)!r}).load()\n"  # left open: closed at exit
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().endswith("__init__.py")


# ---------------------------------------------------------------- scoring
def test_score_matches_the_logprobs_of_a_generation(tiny):
    prompt = "The capital of France is"
    result = tiny.generate(prompt, temperature=0, max_tokens=8, ignore_eos=True, logprobs=True)
    scored = tiny.score(prompt, list(result.token_ids))
    assert scored.token_ids == result.token_ids and not scored.cancelled
    assert all(abs(s - g.logprob) < 1e-4 for s, g in zip(scored.logprobs, result.logprobs, strict=True))
    assert scored.perplexity == pytest.approx(2.718281828 ** (-sum(scored.logprobs) / 8))


def test_scripted_reply_scores_as_certain_and_other_text_does_not(scripted, chat):
    reply = scripted.generate(chat, temperature=0)
    assert scripted.score(chat, list(reply.token_ids)).perplexity < 1.001
    assert scripted.score(chat, "Goodbye, see you tomorrow").perplexity > 10


def test_score_rejects_bad_input_and_a_running_generation(tiny):
    for continuation, code in (("", "invalid_argument"), ([10**9], "invalid_argument"), (b"x", "invalid_argument"),
                               ("word " * 3000, "context_length_exceeded")):
        with pytest.raises(MnnEngineError) as err:
            tiny.score("Hello", continuation)
        assert err.value.code == code, continuation
    codes = []

    def score_inside(_piece: str) -> None:
        if not codes:
            with pytest.raises(MnnEngineError) as inner:
                tiny.score("Hello", "world")
            codes.append(inner.value.code)

    tiny.generate("Hello", callback=score_inside, max_tokens=2, ignore_eos=True)
    assert codes == ["busy"]
    assert tiny.score("Hello", "world").logprobs  # the model is usable afterwards


def test_cancel_stops_scoring(tiny):
    continuation = list(range(1000, 2500))
    with cancelling(tiny.cancel):
        scored = tiny.score("Hello", continuation)
    assert scored.cancelled and scored.logprobs == () and scored.perplexity == float("inf")
    assert len(tiny.score("Hello", continuation).logprobs) == len(continuation)  # the next one is whole


def test_broken_kv_quantisation_modes_are_refused_however_given(tmp_path):
    with pytest.raises(MnnEngineError) as err:
        Llm(test_model_dir("tiny"), quant_qkv=3)
    assert err.value.code == "invalid_argument" and err.value.param == "quant_qkv"
    model = tmp_path / "tiny"
    shutil.copytree(test_model_dir("tiny"), model)
    config = json.loads((model / "config.json").read_text())
    (model / "config.json").write_text(json.dumps({**config, "quant_qkv": 4}))
    with pytest.raises(MnnEngineError) as err:
        Llm(model)
    assert err.value.param == "quant_qkv"
    Llm(model, quant_qkv=1)  # an override replaces the file's setting


def test_a_model_opened_by_path_maps_its_prepared_weights_as_serve_does(tmp_path, monkeypatch):
    """``Llm(path)`` loads with MNN's mmap cache of prepared weights (in the
    store's cache, by the model's path), as ``serve`` does; a later load maps
    them instead of repacking. An explicit ``use_mmap`` is left alone."""
    monkeypatch.setenv("MNN_ENGINE_HOME", str(tmp_path / "home"))
    model = test_model_dir("smollm2-135m")
    with Llm(model, thread_num=1) as llm:
        cache = Path(llm._mnn_overrides["tmp_path"])
        assert llm._mnn_overrides["use_mmap"] is True and cache.parent == tmp_path / "home" / "cache"
        assert llm.generate("Hi", max_tokens=2, temperature=0).completion_tokens == 2
    weights = sum(f.stat().st_size for f in cache.iterdir() if f.name != "model-stamp.json")
    assert weights > 1_000_000  # MNN's prepared weights
    with Llm(model, thread_num=1, use_mmap=False) as plain:
        assert "tmp_path" not in plain._mnn_overrides and plain._mnn_overrides["use_mmap"] is False


@pytest.mark.parametrize(("model", "config"), [("smollm2-135m", {"memory": "normal"}), ("tiny-audio", {})])
def test_what_mnn_cannot_map_warm_loads_without_the_mmap_cache(tmp_path, model, config):
    """MNN 3.6.1 crashes on a warm load of its own mmap cache of float weights
    (memory "normal": a segfault) and of an audio model (a SIGFPE): use_mmap
    is dropped there, even when asked for."""
    for _ in range(2):  # the second load is the warm one that crashed
        with Llm(test_model_dir(model), thread_num=1, use_mmap=True, tmp_path=str(tmp_path), **config) as llm:
            assert llm._mnn_overrides["use_mmap"] is False
            assert llm.generate("Hi", max_tokens=2, temperature=0).completion_tokens == 2


def test_a_huge_repetition_penalty_leaves_the_grammar_a_token():
    """Found by the OpenAPI fuzzer: ``repetition_penalty`` 1e308 (a valid positive number) turned every seen token's
    logit into -inf; once a schema's object closed, the grammar allowed only EOS (seen in the chat template), so
    every allowed logit was -inf and the choice fell to token 0, which the grammar refused (a 500). The penalised
    logit now stays the lowest finite float: the object closes and the answer stops."""
    schema = {"type": "object", "properties": {}, "additionalProperties": False}
    messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"},
                {"role": "user", "content": "json"}]
    with Llm(test_model_dir("tiny"), thread_num=2) as llm:
        for penalty in (1.0, 1e30, 1.0730270787873989e308):
            result = llm.generate(messages, max_tokens=8, repetition_penalty=penalty,
                                  response_format={"type": "json_schema", "json_schema": {"name": "x",
                                                                                          "schema": schema}})
            assert (result.text, result.finish_reason) == ("{}", "stop"), penalty
