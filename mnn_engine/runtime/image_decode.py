"""Every image is decoded in full, by Pillow, before MNN is given it.

MNN decodes an image tag's file with stb_image (``MNN::CV::imread``), on the
generation thread. A PNG whose zlib stream is cut inside a deflate block sent
stb into an endless loop there (the generation slot never freed, SIGTERM could
not end the process); PNGs with an empty ``IDAT``, no ``PLTE`` for a palette,
an undefined interlace method or far fewer pixels than their header declares
made stb fail and MNN skip the image silently, answering as if none had been
sent. The header check (``media_header``) sees none of that. So:

- ``decode_image`` decodes the whole image with Pillow (a maintained decoder
  that checks the zlib stream and the CRCs of a PNG and the scans of a JPEG),
  refusing what it cannot decode with ``MediaRefused``, and returns the pixels
  as an uncompressed 24-bit BMP: what MNN's stb then reads holds no
  compressed stream and no header it could misread. The server writes that
  BMP (``write_decoded_image``, straight into the request's private file),
  never the client's bytes (``api/openai_chat``).
- ``check_image`` decodes a caller's own file the same way and discards the
  pixels (``media.check_files``, for ``media.trusted`` files): MNN reads the
  file itself, now known to decode.

The pixels are stb's for PNG and BMP (lossless formats, alpha dropped as stb
drops it when asked for three channels, 16-bit samples cut to their high byte
as stb does); a JPEG's may differ from stb's by a level or two (two IDCTs).
Pillow is the ``vision`` extra: without it no image is given to MNN at all.
"""

from __future__ import annotations

import io
from typing import Any, BinaryIO

from ..errors import MnnEngineError
from .media_header import MediaRefused, read_image_header
from .memory import TRIM_AFTER_BYTES, trim_allocator

#: Pillow's names of the formats MNN's stb reads, by ``media_header``'s names
_PILLOW_FORMATS = {"png": "PNG", "jpeg": "JPEG", "bmp": "BMP"}


def _pillow() -> Any:
    try:
        from PIL import Image, ImageFile
    except ImportError as exc:
        raise MnnEngineError(
            "dependency_missing",
            "images are decoded by Pillow before MNN sees them, and it is not installed: "
            "pip install 'mnn-engine[vision]' (in Termux: pkg install python-pillow)") from exc
    ImageFile.LOAD_TRUNCATED_IMAGES = False  # a truncated image is refused, never padded
    return Image


def _decoded(data: bytes) -> Any:
    """The image, decoded in full (its header checked first: a bomb is never decoded)."""
    header = read_image_header(data)
    image_module = _pillow()
    try:
        image = image_module.open(io.BytesIO(data), formats=[_PILLOW_FORMATS[header.format]])
        image.load()
    except image_module.DecompressionBombError as exc:  # pragma: no cover - the header check refuses these first
        raise MediaRefused(f"the image is too large: {exc}") from exc
    except Exception as exc:
        raise MediaRefused(f"the {header.format.upper()} cannot be decoded ({_reason(exc)})") from exc
    if image.size != (header.width, header.height):  # pragma: no cover - a decoder that disagrees with the header
        raise MediaRefused(f"the image decodes to {image.size[0]}x{image.size[1]}, its header says "
                           f"{header.width}x{header.height}")
    return image


def check_image(data: bytes) -> None:
    """Decode ``data`` in full; ``MediaRefused`` if it cannot be."""
    _decoded(data).close()


def write_decoded_image(data: bytes, out: BinaryIO) -> None:
    """Decode ``data`` in full (``MediaRefused`` if it cannot be, before anything
    is written) and write its pixels to ``out`` as an uncompressed 24-bit BMP,
    what MNN's stb_image reads back pixel for pixel.

    Written straight to ``out``: a 16 MP image is 48 MiB of pixels, and an
    in-memory BMP besides them would double what a request holds at its peak."""
    decoded = _decoded(data)
    image = decoded
    try:
        if image.mode in ("I;16", "I;16B", "I;16L", "I"):  # 16-bit grey: its high byte, as stb keeps it
            image = image.point(lambda v: v / 256).convert("L")
        (image if image.mode == "RGB" else image.convert("RGB")).save(out, format="BMP")
    finally:
        image.close()
        decoded.close()  # the 16-bit original too, when a converted copy was written
        if decoded.width * decoded.height * 3 >= TRIM_AFTER_BYTES:  # its pixels are freed: given back now
            trim_allocator()


def decode_image(data: bytes) -> bytes:
    """``write_decoded_image``'s BMP as bytes."""
    out = io.BytesIO()
    write_decoded_image(data, out)
    return out.getvalue()


def _reason(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text[:200]
