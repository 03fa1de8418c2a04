"""What an image or a sound is, read from its header before MNN decodes it.

MNN reads an image tag's file with ``MNN::CV::imread``, that is stb_image
built with ``STBI_ONLY_JPEG``, ``STBI_ONLY_PNG`` and ``STBI_ONLY_BMP``
(``tools/cv/source/imgcodecs/imgcodecs.cpp``), which decodes the whole image
to 3 bytes a pixel before the vision encoder resizes it. A 100-byte PNG can
declare 60,000 x 60,000 pixels (a decompression bomb: 10 GB decoded), and
anything else (SVG, WebP, a GIF, a truncated file) makes stb fail later, on
the generation thread. So the server reads the header first: the format
must be one MNN decodes, the dimensions within ``MAX_SIDE`` and
``MAX_PIXELS``, and the file long enough to hold what its header promises
the decoder will start reading. Decoded, an accepted image takes at most
``MAX_PIXELS * 3`` bytes (48 MiB) on its way to the encoder.

Sound: MNN's ``MNN::AUDIO::load`` (``tools/audio/source/audio.cpp``) reads
WAV only, PCM (8, 16 or 32 bits) or IEEE float, its ``fmt `` chunk right
after the RIFF header; Qwen2-Audio's encoder takes at most 30 s (1,500
positions of 20 ms). ``read_wav_header`` checks the same, and the length.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass

#: the longest side accepted, in pixels (phones' cameras: 4000-8000)
MAX_SIDE = 8192
#: pixels accepted in all (16 megapixels: 48 MiB decoded, RGB)
MAX_PIXELS = 16 * 1024 * 1024


#: the longest sound accepted (Qwen2-Audio's encoder: 1,500 positions of 20 ms)
MAX_AUDIO_SECONDS = 30.0
#: the shortest: MNN's loader resamples to 16 kHz, and under about 200 samples there its
#: reflect-padded STFT and the encoder's shapes fail; 6 ms (100 samples) killed the process (SIGSEGV)
MIN_AUDIO_SECONDS = 0.1
#: the sample rates accepted: what recordings use (telephone 8 kHz to studio 192 kHz); MNN's
#: resampling of an extreme rate turns a short file into too few samples, or into far too many
AUDIO_RATES = (8000, 192000)
#: channels accepted (MNN mixes them down)
MAX_AUDIO_CHANNELS = 8


class MediaRefused(ValueError):
    """The image or sound is not one MNN should decode; the message says why."""


@dataclass(frozen=True)
class ImageHeader:
    format: str  # png, jpeg or bmp
    width: int
    height: int


def read_image_header(data: bytes) -> ImageHeader:
    """The format and size of an image MNN can decode, within the limits;
    ``MediaRefused`` otherwise."""
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        header = _png(data)
    elif data.startswith(b"\xff\xd8\xff"):
        header = _jpeg(data)
    elif data.startswith(b"BM"):
        header = _bmp(data)
    else:
        kind = "SVG" if data.lstrip()[:5].lower() in (b"<svg ", b"<?xml") else \
            "WebP" if data[:4] == b"RIFF" and data[8:12] == b"WEBP" else \
            "GIF" if data[:4] == b"GIF8" else "not an image"
        raise MediaRefused(f"the image must be PNG, JPEG or BMP (this one is {kind})")
    if header.width < 1 or header.height < 1:
        raise MediaRefused(f"the image has no pixels ({header.width}x{header.height})")
    if max(header.width, header.height) > MAX_SIDE or header.width * header.height > MAX_PIXELS:
        raise MediaRefused(f"the image is {header.width}x{header.height} pixels; at most {MAX_SIDE} a side and "
                           f"{MAX_PIXELS // 2**20} megapixels are accepted (shrink it first)")
    if header.format == "png":
        _png_chunks(data)
    return header


def _png(data: bytes) -> ImageHeader:
    if len(data) < 33 or data[12:16] != b"IHDR":
        raise MediaRefused("the PNG is truncated (no IHDR chunk)")
    width, height, depth, colour, compression, filtering, interlace = struct.unpack(">IIBBBBB", data[16:29])
    if depth not in (1, 2, 4, 8, 16) or colour not in (0, 2, 3, 4, 6) or compression or filtering:
        raise MediaRefused("the PNG's header is malformed")
    if interlace not in (0, 1):
        raise MediaRefused(f"the PNG's interlace method {interlace} is undefined")
    return ImageHeader("png", width, height)


def _png_chunks(data: bytes) -> None:
    """The PNG's chunks walked as the format lays them out (each whole, its CRC right): a
    PLTE before the image data of a palette image, the IDAT chunks together and not empty,
    then IEND. MNN's stb skipped such images silently, or looped on them."""
    palette_image = data[25] == 3
    at, seen, idat_bytes, idat_ended = 8, set(), 0, False
    while True:
        if at + 12 > len(data):
            raise MediaRefused("the PNG is truncated (it ends inside a chunk or before IEND)")
        (length,) = struct.unpack(">I", data[at:at + 4])
        kind = data[at + 4:at + 8]
        end = at + 12 + length
        if length > 0x7FFFFFFF or end > len(data):
            raise MediaRefused(f"the PNG is truncated (its {kind.decode('latin-1')!r} chunk is cut off)")
        if zlib.crc32(data[at + 4:end - 4]) != struct.unpack(">I", data[end - 4:end])[0]:
            raise MediaRefused(f"the PNG is corrupt (its {kind.decode('latin-1')!r} chunk's CRC is wrong)")
        if kind == b"IDAT":
            if idat_ended:
                raise MediaRefused("the PNG's image data (IDAT) is split by other chunks")
            if palette_image and b"PLTE" not in seen:
                raise MediaRefused("the PNG is a palette image without a palette (PLTE)")
            idat_bytes += length
        elif b"IDAT" in seen:
            idat_ended = True
        if kind == b"IEND":
            break
        seen.add(kind)
        at = end
    if idat_bytes == 0:
        raise MediaRefused("the PNG has no image data (IDAT)")


def _jpeg(data: bytes) -> ImageHeader:
    at = 2
    while at + 4 <= len(data):
        if data[at] != 0xFF:
            raise MediaRefused("the JPEG is malformed (a segment does not start with 0xFF)")
        marker = data[at + 1]
        if marker == 0xFF:  # fill byte
            at += 1
            continue
        if marker in (0xD8, 0x01) or 0xD0 <= marker <= 0xD7:  # no length
            at += 2
            continue
        (length,) = struct.unpack(">H", data[at + 2:at + 4])
        if length < 2:
            raise MediaRefused("the JPEG is malformed (a segment length under 2)")
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):  # a start of frame
            if at + 9 > len(data):
                break
            height, width = struct.unpack(">HH", data[at + 5:at + 9])
            if marker not in (0xC0, 0xC1, 0xC2):  # stb_image: baseline and progressive Huffman only
                raise MediaRefused("the JPEG uses a coding MNN's decoder does not read (arithmetic or lossless)")
            return ImageHeader("jpeg", width, height)
        at += 2 + length
    raise MediaRefused("the JPEG is truncated (no frame header)")


def _bmp(data: bytes) -> ImageHeader:
    if len(data) < 26:
        raise MediaRefused("the BMP is truncated")
    (offset,) = struct.unpack("<I", data[10:14])
    (size,) = struct.unpack("<I", data[14:18])
    if size == 12:
        width, height = struct.unpack("<HH", data[18:22])
    elif size >= 40 and len(data) >= 26:
        width, height = struct.unpack("<ii", data[18:26])
    else:
        raise MediaRefused("the BMP's header is malformed")
    if offset >= len(data):
        raise MediaRefused("the BMP is truncated (no pixel data)")
    return ImageHeader("bmp", abs(width), abs(height))


@dataclass(frozen=True)
class WavHeader:
    channels: int
    sample_rate: int
    bits: int
    seconds: float


def read_wav_header(data: bytes, *, complete: bool = True) -> WavHeader:
    """A WAV file as MNN's loader reads it, within ``MAX_AUDIO_SECONDS`` (by
    its declared length); ``MediaRefused`` otherwise. ``complete``: ``data``
    is the whole file, so a data chunk shorter than declared is truncated."""
    if data[:4] != b"RIFF" or data[8:12] != b"WAVE":
        kind = "MP3" if data[:3] == b"ID3" or data[:2] in (b"\xff\xfb", b"\xff\xf3") else \
            "Ogg" if data[:4] == b"OggS" else "FLAC" if data[:4] == b"fLaC" else "not a sound"
        raise MediaRefused(f"the sound must be WAV (this one is {kind})")
    if len(data) < 44 or data[12:16] != b"fmt ":
        raise MediaRefused("the WAV is truncated or has chunks before its fmt chunk (MNN reads fmt first)")
    fmt, channels, rate, byte_rate, align, bits = struct.unpack("<HHIIHH", data[20:36])
    if fmt not in (1, 3) or bits not in (8, 16, 32) or channels < 1 or \
            align != channels * bits // 8 or byte_rate != rate * align:
        raise MediaRefused("the WAV must be PCM (8, 16 or 32 bits) or IEEE float, with a consistent header")
    if not AUDIO_RATES[0] <= rate <= AUDIO_RATES[1] or channels > MAX_AUDIO_CHANNELS:
        raise MediaRefused(f"the WAV's sample rate must be {AUDIO_RATES[0]}-{AUDIO_RATES[1]} Hz and its channels "
                           f"at most {MAX_AUDIO_CHANNELS} (this one: {rate} Hz, {channels})")
    at = 20 + struct.unpack("<I", data[16:20])[0]
    while at + 8 <= len(data):
        kind, size = data[at:at + 4], struct.unpack("<I", data[at + 4:at + 8])[0]
        if kind == b"data":
            seconds = size / byte_rate
            if complete and len(data) - at - 8 < size:
                raise MediaRefused("the WAV is truncated (fewer samples than its header declares)")
            if seconds > MAX_AUDIO_SECONDS:
                raise MediaRefused(f"the sound is {seconds:.0f} s long; at most {MAX_AUDIO_SECONDS:.0f} s")
            if seconds < MIN_AUDIO_SECONDS:
                raise MediaRefused(f"the sound is {seconds * 1000:.0f} ms long; at least "
                                   f"{MIN_AUDIO_SECONDS * 1000:.0f} ms")
            return WavHeader(channels, rate, bits, seconds)
        at += 8 + size + (size & 1)
    raise MediaRefused("the WAV is truncated (no data chunk)")
