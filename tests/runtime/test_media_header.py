"""The image header check that runs before MNN's decoder (stb_image with
JPEG, PNG and BMP only) is given a file: formats, dimensions, truncation."""

from __future__ import annotations

import io
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from media_samples import MALFORMED_PNGS, bmp, png, png_bomb, raw_wav, wav

from mnn_engine.runtime.image_decode import decode_image
from mnn_engine.runtime.media_header import (
    AUDIO_RATES,
    MAX_AUDIO_CHANNELS,
    MAX_AUDIO_SECONDS,
    MAX_PIXELS,
    MAX_SIDE,
    MIN_AUDIO_SECONDS,
    MediaRefused,
    read_image_header,
    read_wav_header,
)


def jpeg(width: int, height: int, sof: int = 0xC0, exif: int = 0) -> bytes:
    """A JPEG's leading segments (SOI, an APP1 of ``exif`` bytes, a frame header), as ITU-T T.81
    (JPEG) Annex B lays them out: what the check reads. No JPEG encoder is installed here; a real
    JPEG (Chromium's canvas encoder) goes through the check and MNN's decoder in the page test."""
    app1 = b"\xff\xe1" + struct.pack(">H", exif + 2) + b"\0" * exif if exif else b""
    frame = b"\xff" + bytes([sof]) + struct.pack(">HBHHB", 11, 8, height, width, 1) + b"\x01\x11\x00"
    return b"\xff\xd8" + app1 + frame + b"\xff\xda"


def test_what_mnn_decodes_is_read():
    assert read_image_header(png(40, 30)).__dict__ == {"format": "png", "width": 40, "height": 30}
    assert (read_image_header(bmp(7, 5)).width, read_image_header(bmp(7, 5)).height) == (7, 5)
    assert read_image_header(jpeg(640, 480, exif=30000)).format == "jpeg"  # past large metadata
    assert read_image_header(jpeg(100, 50, sof=0xC2)).width == 100  # progressive


@pytest.mark.parametrize(("data", "says"), [
    (png_bomb(), "60000x60000"),
    (png(1, MAX_SIDE + 1)[:33] + b"IDAT", f"at most {MAX_SIDE}"),
    (jpeg(MAX_SIDE, MAX_SIDE), "megapixels"),
    (jpeg(10, 10, sof=0xC9), "arithmetic"),
    (png(8, 8)[:20], "truncated"),
    (png(8, 8)[:33], "before IEND"),  # the header alone
    (b"<svg xmlns='http://www.w3.org/2000/svg'/>", "SVG"),
    (b"RIFF\0\0\0\0WEBPVP8 ", "WebP"),
    (b"GIF89a" + b"\0" * 20, "GIF"),
    (b"%PDF-1.7 pretending", "not an image"),
    (b"\xff\xd8\xff\xe0", "truncated"),
    (b"BM" + b"\0" * 10, "truncated"),
])
def test_what_mnn_should_not_decode_is_refused(data, says):
    with pytest.raises(MediaRefused) as err:
        read_image_header(data)
    assert says in str(err.value)


@given(st.binary(max_size=200))
def test_any_bytes_are_read_or_refused_never_crash(data):
    try:
        header = read_image_header(data)
    except MediaRefused:
        return
    assert 0 < header.width <= MAX_SIDE and 0 < header.height <= MAX_SIDE
    assert header.width * header.height <= MAX_PIXELS


def test_a_wav_as_mnn_reads_it():
    header = read_wav_header(wav(2.0))
    assert (header.channels, header.sample_rate, header.bits) == (1, 16000, 16) and abs(header.seconds - 2) < 1e-6
    with pytest.raises(MediaRefused):
        read_wav_header(b"OggS" + b"\0" * 60)
    big = wav(1.0)
    assert read_wav_header(big[:1000], complete=False).seconds == 1.0  # a file read in part: its declared length


@pytest.mark.parametrize(("sound", "says"), [
    ({"seconds": 0.006}, "at least 100 ms"),  # 100 samples: MNN's loader crashed the process (SIGSEGV)
    ({"seconds": 0.001, "rate": 4_000_000}, "sample rate"),  # resampled to 16 kHz: 16 samples
    ({"seconds": 20.0, "rate": 1}, "sample rate"),  # 20 samples MNN would stretch to 20 s
    ({"seconds": 1.0, "rate": 7999}, "sample rate"),
])
def test_wavs_mnn_cannot_hear_are_refused(sound, says):
    with pytest.raises(MediaRefused, match=says):
        read_wav_header(wav(**sound))


def test_a_wav_of_nine_channels_is_refused():
    assert read_wav_header(raw_wav(1, 8, 16000, 16, 1600)).channels == 8
    with pytest.raises(MediaRefused, match="channels"):
        read_wav_header(raw_wav(1, 9, 16000, 16, 1600))


def test_the_wav_bounds_themselves_are_accepted():
    for rate in AUDIO_RATES:
        assert read_wav_header(wav(MIN_AUDIO_SECONDS, rate=rate)).sample_rate == rate


@given(fmt=st.integers(0, 4), channels=st.integers(0, 12), rate=st.integers(0, 4_000_000),
       bits=st.sampled_from([4, 8, 12, 16, 24, 32, 64]), frames=st.integers(0, 20_000))
def test_whatever_wav_header_is_accepted_lies_within_the_bounds(fmt, channels, rate, bits, frames):
    try:
        header = read_wav_header(raw_wav(fmt, channels, rate, bits, frames))
    except MediaRefused:
        return
    assert fmt in (1, 3) and header.bits in (8, 16, 32) and 1 <= header.channels <= MAX_AUDIO_CHANNELS
    assert AUDIO_RATES[0] <= header.sample_rate <= AUDIO_RATES[1]
    assert MIN_AUDIO_SECONDS <= header.seconds <= MAX_AUDIO_SECONDS


# ---------------------------------------------------------------- the full decode (runtime/image_decode.py)
@pytest.mark.parametrize("name", sorted(MALFORMED_PNGS))
def test_pngs_sound_in_header_and_broken_inside_are_refused(name):
    with pytest.raises(MediaRefused):
        decode_image(MALFORMED_PNGS[name])


def _pillow_image(mode: str, size=(23, 17), **save) -> bytes:
    from PIL import Image

    image = Image.linear_gradient("L").resize(size).convert(mode) if mode != "RGB" else \
        Image.merge("RGB", [Image.linear_gradient("L").resize(size).rotate(a) for a in (0, 90, 180)])
    out = io.BytesIO()
    image.save(out, format=save.pop("format", "PNG"), **save)
    return out.getvalue()


@pytest.mark.parametrize(("mode", "save"), [("RGB", {}), ("RGBA", {}), ("L", {}), ("LA", {}), ("P", {}), ("1", {}),
                                            ("I;16", {}), ("RGB", {"interlace": 1}), ("RGB", {"format": "JPEG"}),
                                            ("L", {"format": "JPEG", "progressive": True}), ("RGB", {"format": "BMP"})])
def test_a_decoded_image_is_a_plain_bmp_of_its_pixels(mode, save):
    data = _pillow_image(mode, **dict(save))
    out = decode_image(data)
    header = read_image_header(out)
    assert (header.format, header.width, header.height) == ("bmp", 23, 17)
    assert out[28:30] == b"\x18\x00" and out[30:34] == b"\0\0\0\0"  # 24 bits a pixel, uncompressed (BI_RGB)


@settings(max_examples=300)
@given(st.data())
def test_mutated_images_are_decoded_or_refused_never_anything_else(data):
    """Flipped, cut and inserted bytes in a PNG, a JPEG and a BMP: decode_image gives a plain BMP of
    the header's size or MediaRefused; no other exception, no hang (Pillow's decoders are bounded)."""
    original = data.draw(st.sampled_from([_pillow_image("RGB"), _pillow_image("RGB", format="JPEG"),
                                          _pillow_image("P"), _pillow_image("RGB", format="BMP")]))
    mutated = bytearray(original)
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(0, len(mutated) - 1))
        action = data.draw(st.sampled_from(["flip", "cut", "insert"]))
        if action == "flip":
            mutated[at] ^= data.draw(st.integers(1, 255))
        elif action == "cut":
            del mutated[at:at + data.draw(st.integers(1, 64))]
        else:
            mutated[at:at] = data.draw(st.binary(min_size=1, max_size=16))
        if not mutated:
            return
    try:
        out = decode_image(bytes(mutated))
    except MediaRefused:
        return
    assert read_image_header(out).format == "bmp"


def test_a_big_images_buffers_are_given_back_once_it_is_written(tmp_path):
    """A 6 MP image decoded and written in a thread of its own (as a server's text worker does) leaves
    nothing behind: without image_decode's trim glibc kept 23 MiB of its freed pixels in that thread's
    arena (measured in a fresh process, 3000x2000 PNG)."""
    import threading

    from mnn_engine.runtime.image_decode import write_decoded_image
    from mnn_engine.runtime.memory import rss_bytes

    data = png(3000, 2000, pattern=True)
    before = rss_bytes()
    with open(tmp_path / "out.bmp", "wb") as out:
        worker = threading.Thread(target=write_decoded_image, args=(data, out))
        worker.start()
        worker.join()
    assert (tmp_path / "out.bmp").stat().st_size == 54 + 3000 * 2000 * 3
    assert rss_bytes() - before < 8 * 2**20, (before, rss_bytes())
