"""Sound through the real MNN audio graph of the tiny Qwen2-Audio test model
(random weights; a real Whisper-style audio tower exported by llmexport):
the Python API with ``<audio>`` tags, OpenAI's ``input_audio`` parts, and
the sounds MNN's loader must not be given."""

from __future__ import annotations

import base64

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from live_server import Live
from media_samples import png, raw_wav, wav
from support import test_model_dir

from mnn_engine import Llm, MnnEngineError
from mnn_engine.runtime.media import trusted
from mnn_engine.runtime.media_header import AUDIO_RATES, MAX_AUDIO_CHANNELS, MIN_AUDIO_SECONDS, read_wav_header

QUESTION = "What do you hear?"
#: one second of 16 kHz sound: 100 mel frames, halved by the encoder's convolution and its pooling, and
#: <|audio_bos|>, <|audio_eos|> around them
ONE_SECOND_TOKENS = 25


def _audio_part(data: bytes, fmt: str = "wav") -> dict:
    return {"type": "input_audio", "input_audio": {"data": base64.b64encode(data).decode(), "format": fmt}}


def test_the_python_api_hears_through_the_audio_graph(tmp_path):
    low, high = tmp_path / "low.wav", tmp_path / "high.wav"
    low.write_bytes(wav(1.0, 440))
    high.write_bytes(wav(1.0, 1800))
    with Llm(test_model_dir("tiny-audio"), thread_num=2) as llm:
        text = llm.generate([{"role": "user", "content": QUESTION}], max_tokens=1)

        def top(path):
            with trusted(path, kind="audio"):
                result = llm.generate([{"role": "user", "content": f"<audio>{path}</audio>{QUESTION}"}],
                                      max_tokens=1, temperature=0, logprobs=True, top_logprobs=5)
            return result.prompt_tokens, result.logprobs[0].top

        tokens, first = top(low)
        assert tokens == text.prompt_tokens + ONE_SECOND_TOKENS
        assert top(low)[1] == first and top(high)[1] != first  # the same sound, the same logits; another, other
        for rate in AUDIO_RATES:  # the shortest sound at the extreme rates accepted: MNN's encoder hears it
            edge = tmp_path / f"edge-{rate}.wav"
            edge.write_bytes(wav(MIN_AUDIO_SECONDS, rate=rate))
            assert top(edge)[0] > text.prompt_tokens
        bad = tmp_path / "bad.wav"
        bad.write_bytes(b"ID3" + b"\0" * 200)  # an MP3: MNN's loader reads WAV only
        with trusted(bad, kind="audio"), pytest.raises(MnnEngineError) as err:
            llm.generate([{"role": "user", "content": f"<audio>{bad}</audio>{QUESTION}"}], max_tokens=1)
        assert "must be WAV" in err.value.message


@pytest.fixture(scope="module")
def audio_server(tmp_path_factory):
    live = Live(tmp_path_factory.mktemp("store"), "tiny-audio")
    yield live
    live.close()


def test_openai_input_audio_parts(audio_server):
    status, _, text = audio_server.post_json({"messages": [{"role": "user", "content": QUESTION}], "max_tokens": 1})
    assert status == 200
    content = [{"type": "text", "text": QUESTION}, _audio_part(wav(1.0))]
    status, _, heard = audio_server.post_json({"messages": [{"role": "user", "content": content}], "max_tokens": 2})
    assert status == 200, heard
    assert heard["usage"]["prompt_tokens"] == text["usage"]["prompt_tokens"] + ONE_SECOND_TOKENS
    two = [{"type": "text", "text": QUESTION}, _audio_part(wav(1.0)), _audio_part(wav(2.0, 900))]
    status, _, both = audio_server.post_json({"messages": [{"role": "user", "content": two}], "max_tokens": 1})
    assert status == 200 and both["usage"]["prompt_tokens"] > heard["usage"]["prompt_tokens"] + ONE_SECOND_TOKENS


def _truncated() -> bytes:
    data = wav(1.0)
    return data[:len(data) // 2]


@pytest.mark.parametrize(("part", "says"), [
    (_audio_part(b"ID3\x04" + b"\0" * 64, "mp3"), "WAV only"),
    (_audio_part(b"ID3\x04" + b"\0" * 64), "this one is MP3"),
    (_audio_part(wav(31.0)), "at most 30 s"),
    (_audio_part(wav(0.006)), "at least 100 ms"),  # MNN's loader killed the server (SIGSEGV) on this one
    (_audio_part(wav(0.001, rate=4_000_000)), "sample rate"),
    (_audio_part(_truncated()), "truncated"),
    (_audio_part(raw_wav(2, 1, 16000, 16, 2)), "PCM"),  # format tag 2: ADPCM
    ({"type": "input_audio", "input_audio": {"data": "***", "format": "wav"}}, "base64"),
    ({"type": "input_audio", "input_audio": "nope"}, "input_audio: must be"),
])
def test_sounds_mnn_should_not_load_are_400(audio_server, part, says):
    status, _, body = audio_server.post_json({"messages": [{"role": "user", "content": [part]}], "max_tokens": 1})
    assert status == 400 and says in body["error"]["message"], body


def test_an_image_for_a_sound_model_and_a_sound_for_a_text_model_are_400(audio_server, tmp_path):
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64," + base64.b64encode(png(8, 8)).decode()}}
    status, _, body = audio_server.post_json({"messages": [{"role": "user", "content": [image]}]})
    assert status == 400 and "text-only" in body["error"]["message"]
    text_model = Live(tmp_path, "tiny")
    try:
        status, _, body = text_model.post_json({"messages": [{"role": "user", "content": [_audio_part(wav(0.5))]}]})
        assert status == 400 and "does not take sound" in body["error"]["message"]
    finally:
        text_model.close()


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(fmt=st.sampled_from([1, 3]), channels=st.integers(1, MAX_AUDIO_CHANNELS),
       rate=st.one_of(st.sampled_from(AUDIO_RATES), st.integers(*AUDIO_RATES)), bits=st.sampled_from([8, 16, 32]),
       seconds=st.floats(MIN_AUDIO_SECONDS, 0.6), fill=st.integers(0, 255))
def test_every_wav_the_check_accepts_is_heard(audio_llm, audio_text_tokens, tmp_path, fmt, channels, rate, bits,
                                              seconds, fill):
    """Any header within the bounds (PCM or float, 8 to 32 bits, 1 to 8 channels, 8 to 192 kHz,
    0.1 s and longer) passes read_wav_header and is heard by MNN's real loader and audio graph, in
    this process: a crash, an error or a sound MNN skips fails the run. (The refusals are
    tests/runtime/test_media_header.py's.)"""
    data = raw_wav(fmt, channels, rate, bits, max(int(seconds * rate), int(MIN_AUDIO_SECONDS * rate) + 1), fill)
    read_wav_header(data)
    path = tmp_path / "fuzz.wav"
    path.write_bytes(data)
    with trusted(path, kind="audio"):
        heard = audio_llm.generate([{"role": "user", "content": f"<audio>{path}</audio>{QUESTION}"}], max_tokens=1)
    assert heard.prompt_tokens > audio_text_tokens


@pytest.fixture(scope="module")
def audio_llm():
    with Llm(test_model_dir("tiny-audio"), thread_num=2) as llm:
        yield llm


@pytest.fixture(scope="module")
def audio_text_tokens(audio_llm):
    """The question's prompt tokens without a sound: a sound MNN skipped would leave it so."""
    return audio_llm.generate([{"role": "user", "content": QUESTION}], max_tokens=1).prompt_tokens
