"""What an image is, read from its header before MNN decodes it.

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
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

#: the longest side accepted, in pixels (phones' cameras: 4000-8000)
MAX_SIDE = 8192
#: pixels accepted in all (16 megapixels: 48 MiB decoded, RGB)
MAX_PIXELS = 16 * 1024 * 1024


class ImageRefused(ValueError):
    """The image is not one MNN should decode; the message says why."""


@dataclass(frozen=True)
class ImageHeader:
    format: str  # png, jpeg or bmp
    width: int
    height: int


def read_header(data: bytes) -> ImageHeader:
    """The format and size of an image MNN can decode, within the limits;
    ``ImageRefused`` otherwise."""
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
        raise ImageRefused(f"the image must be PNG, JPEG or BMP (this one is {kind})")
    if header.width < 1 or header.height < 1:
        raise ImageRefused(f"the image has no pixels ({header.width}x{header.height})")
    if max(header.width, header.height) > MAX_SIDE or header.width * header.height > MAX_PIXELS:
        raise ImageRefused(f"the image is {header.width}x{header.height} pixels; at most {MAX_SIDE} a side and "
                           f"{MAX_PIXELS // 2**20} megapixels are accepted (shrink it first)")
    return header


def _png(data: bytes) -> ImageHeader:
    if len(data) < 33 or data[12:16] != b"IHDR":
        raise ImageRefused("the PNG is truncated (no IHDR chunk)")
    width, height, depth, colour = struct.unpack(">IIBB", data[16:26])
    if b"IDAT" not in data[33:]:
        raise ImageRefused("the PNG has no image data (IDAT)")
    if depth not in (1, 2, 4, 8, 16) or colour not in (0, 2, 3, 4, 6):
        raise ImageRefused("the PNG's header is malformed")
    return ImageHeader("png", width, height)


def _jpeg(data: bytes) -> ImageHeader:
    at = 2
    while at + 4 <= len(data):
        if data[at] != 0xFF:
            raise ImageRefused("the JPEG is malformed (a segment does not start with 0xFF)")
        marker = data[at + 1]
        if marker == 0xFF:  # fill byte
            at += 1
            continue
        if marker in (0xD8, 0x01) or 0xD0 <= marker <= 0xD7:  # no length
            at += 2
            continue
        (length,) = struct.unpack(">H", data[at + 2:at + 4])
        if length < 2:
            raise ImageRefused("the JPEG is malformed (a segment length under 2)")
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):  # a start of frame
            if at + 9 > len(data):
                break
            height, width = struct.unpack(">HH", data[at + 5:at + 9])
            if marker not in (0xC0, 0xC1, 0xC2):  # stb_image: baseline and progressive Huffman only
                raise ImageRefused("the JPEG uses a coding MNN's decoder does not read (arithmetic or lossless)")
            return ImageHeader("jpeg", width, height)
        at += 2 + length
    raise ImageRefused("the JPEG is truncated (no frame header)")


def _bmp(data: bytes) -> ImageHeader:
    if len(data) < 26:
        raise ImageRefused("the BMP is truncated")
    (offset,) = struct.unpack("<I", data[10:14])
    (size,) = struct.unpack("<I", data[14:18])
    if size == 12:
        width, height = struct.unpack("<HH", data[18:22])
    elif size >= 40 and len(data) >= 26:
        width, height = struct.unpack("<ii", data[18:26])
    else:
        raise ImageRefused("the BMP's header is malformed")
    if offset >= len(data):
        raise ImageRefused("the BMP is truncated (no pixel data)")
    return ImageHeader("bmp", abs(width), abs(height))
