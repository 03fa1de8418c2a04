"""The image header check that runs before MNN's decoder (stb_image with
JPEG, PNG and BMP only) is given a file: formats, dimensions, truncation."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st
from media_samples import bmp, png, png_bomb

from mnn_engine.runtime.media_header import MAX_PIXELS, MAX_SIDE, MediaRefused, read_image_header


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
    (png(8, 8)[:33], "no image data"),
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
    from media_samples import wav

    from mnn_engine.runtime.media_header import read_wav_header

    header = read_wav_header(wav(2.0))
    assert (header.channels, header.sample_rate, header.bits) == (1, 16000, 16) and abs(header.seconds - 2) < 1e-6
    with pytest.raises(MediaRefused):
        read_wav_header(b"OggS" + b"\0" * 60)
    big = wav(1.0)
    assert read_wav_header(big[:1000], complete=False).seconds == 1.0  # a file read in part: its declared length


@pytest.mark.parametrize(("sound", "says"), [
    (lambda wav: wav(0.006), "at least 100 ms"),  # 100 samples: MNN's loader crashed the process (SIGSEGV)
    (lambda wav: wav(0.001, rate=4_000_000), "sample rate"),  # resampled to 16 kHz: 16 samples
    (lambda wav: wav(20.0, rate=1), "sample rate"),  # 20 samples MNN would stretch to 20 s
    (lambda wav: wav(1.0, rate=7999), "sample rate"),
])
def test_wavs_mnn_cannot_hear_are_refused(sound, says):
    from media_samples import wav

    from mnn_engine.runtime.media_header import read_wav_header

    with pytest.raises(MediaRefused, match=says):
        read_wav_header(sound(wav))


def test_the_wav_bounds_themselves_are_accepted():
    from media_samples import wav

    from mnn_engine.runtime.media_header import AUDIO_RATES, MIN_AUDIO_SECONDS, read_wav_header

    for rate in AUDIO_RATES:
        assert read_wav_header(wav(MIN_AUDIO_SECONDS, rate=rate)).sample_rate == rate
