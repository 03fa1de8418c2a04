"""Images through a real MNN visual graph (the tiny Qwen2-VL test model:
random weights, a real vision tower exported by llmexport), from the Python
API. Its answer cannot name a colour (random weights), so what is asserted
is what shows that the image reached the model: its tokens in the prompt
count, the same image gives the same logits, another image other ones."""

from __future__ import annotations

import pytest
from media_samples import bmp, png
from support import test_model_dir

from mnn_engine import Llm, MnnEngineError
from mnn_engine.runtime.media import trusted

QUESTION = "What colour is this?"


@pytest.fixture(scope="module")
def vision():
    with Llm(test_model_dir("tiny-vision"), thread_num=2) as llm:
        yield llm


def _first_token(llm: Llm, path, **options):
    with trusted(path):
        result = llm.generate([{"role": "user", "content": f"<img>{path}</img>{QUESTION}"}], max_tokens=2,
                              temperature=0, logprobs=True, top_logprobs=5, **options)
    return result, result.logprobs[0].top


def test_an_image_goes_through_the_visual_graph(vision, tmp_path):
    red, blue = tmp_path / "red.png", tmp_path / "blue.bmp"
    red.write_bytes(png(64, 64, (230, 20, 20)))
    blue.write_bytes(bmp(64, 48, (20, 20, 230)))
    text = vision.generate([{"role": "user", "content": QUESTION}], max_tokens=1, temperature=0)
    first, red_top = _first_token(vision, red)
    again, red_again = _first_token(vision, red)
    _, blue_top = _first_token(vision, blue)
    # Qwen2-VL at image_size 420: (420 / 14 / 2)^2 = 225 image tokens, between <|vision_start|> and <|vision_end|>
    assert first.prompt_tokens - text.prompt_tokens == 225 + 2
    assert red_top == red_again  # the same picture: the same logits, bit for bit
    assert red_top != blue_top  # another picture: other logits (the image reached the model)
    assert first.cached_tokens == again.cached_tokens == 0  # a prompt with an image is never reused


def test_images_in_earlier_turns_and_two_in_one_message(vision, tmp_path):
    one, two = tmp_path / "1.png", tmp_path / "2.png"
    one.write_bytes(png(32, 32, (10, 200, 10)))
    two.write_bytes(png(80, 40, pattern=True))
    with trusted(one, two):
        both = vision.generate([{"role": "user", "content": f"<img>{one}</img><img>{two}</img>Compare them."}],
                               max_tokens=1, temperature=0)
        turns = vision.generate([{"role": "user", "content": f"<img>{one}</img>What is it?"},
                                 {"role": "assistant", "content": "A square."},
                                 {"role": "user", "content": f"<img>{two}</img>And this?"}], max_tokens=1,
                                temperature=0)
    text = vision.generate([{"role": "user", "content": "Compare them."}], max_tokens=1, temperature=0)
    assert both.prompt_tokens - text.prompt_tokens == 2 * (225 + 2)
    assert turns.prompt_tokens > both.prompt_tokens
    after = vision.generate([{"role": "user", "content": QUESTION}], max_tokens=1, temperature=0)
    assert after.finish_reason in ("length", "stop")  # text after images: the model is fine


def test_a_file_mnn_cannot_decode_is_an_error_not_a_crash(vision, tmp_path):
    bad = tmp_path / "not-an-image.png"
    bad.write_bytes(b"this is text, not a picture\n" * 20)
    with trusted(bad), pytest.raises(MnnEngineError):
        vision.generate([{"role": "user", "content": f"<img>{bad}</img>{QUESTION}"}], max_tokens=1)
    assert vision.generate([{"role": "user", "content": QUESTION}], max_tokens=1).completion_tokens == 1


def test_an_image_prompt_never_generated_from_leaves_nothing_behind(vision, tmp_path):
    # MNN's tokenizer keeps each image's encoder output until a forward takes it, by position: a prompt
    # tokenized but never generated from (a refusal, /tokenize) gave the next image prompt its picture
    red, blue = tmp_path / "red.png", tmp_path / "blue.png"
    red.write_bytes(png(64, 64, (230, 20, 20)))
    blue.write_bytes(png(64, 64, (20, 20, 230)))
    _, alone = _first_token(vision, red)
    with trusted(blue):
        vision.tokenize(f"<img>{blue}</img>")
        with pytest.raises(MnnEngineError) as err:
            vision.generate([{"role": "user", "content": f"<img>{blue}</img>" + "word " * 3000}], max_tokens=1)
        assert err.value.code == "context_length_exceeded"
    _, after = _first_token(vision, red)
    assert after == alone


def _pillow_png(mode: str) -> bytes:
    import io

    from PIL import Image

    gradient = Image.linear_gradient("L").resize((61, 47))
    image = Image.merge("RGB", [gradient, gradient.rotate(90), gradient.rotate(180)]).convert(mode) \
        if mode != "I;16" else gradient.point(lambda v: v * 257).convert("I;16")
    out = io.BytesIO()
    image.save(out, format="PNG")
    return out.getvalue()


@pytest.mark.parametrize("mode", ["RGB", "RGBA", "L", "LA", "P", "I;16"])
def test_the_bmp_the_server_writes_gives_mnn_the_pixels_of_the_png(vision, tmp_path, mode):
    """The server hands MNN a BMP of Pillow's decode (runtime/image_decode.py), never the client's
    PNG: the encoder's logits from that BMP equal, bit for bit, those from MNN decoding the PNG itself
    with stb_image (alpha dropped, palette expanded, 16-bit cut to 8 as stb does)."""
    from mnn_engine.runtime.image_decode import decode_image

    original, rewritten = tmp_path / "original.png", tmp_path / "decoded.bmp"
    original.write_bytes(_pillow_png(mode))
    rewritten.write_bytes(decode_image(original.read_bytes()))
    assert _first_token(vision, rewritten)[1] == _first_token(vision, original)[1]


def test_a_png_mnn_would_loop_on_is_refused_before_mnn_reads_it(vision, tmp_path):
    """#42 item 7: a 97-byte PNG whose zlib stream is cut inside a deflate block sent stb_image into an
    endless loop on the generation thread; a file named through trusted() is now decoded in full first."""
    from media_samples import MALFORMED_PNGS

    for name, data in MALFORMED_PNGS.items():
        path = tmp_path / "broken.png"
        path.write_bytes(data)
        with pytest.raises(MnnEngineError) as refused:
            _first_token(vision, path)
        assert refused.value.code == "invalid_argument" and str(path) in refused.value.message, name
