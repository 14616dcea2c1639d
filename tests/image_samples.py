"""Input images for the image_to_video tests: good ones of each format, and the bad ones the API must refuse."""

from __future__ import annotations

import base64
import io
import struct
import zlib

from PIL import Image

__all__ = ["bomb_png", "data_uri", "image_bytes", "rotated_jpeg"]


def image_bytes(
    width: int = 64, height: int = 48, fmt: str = "PNG", color: tuple[int, int, int] = (200, 40, 10)
) -> bytes:
    """A real image: a colour with a gradient, so crops and rotations show."""
    image = Image.new("RGB", (width, height), color)
    for x in range(width):
        image.putpixel((x, 0), (x * 255 // max(1, width - 1), 0, 255))
    out = io.BytesIO()
    image.save(out, format=fmt)
    return out.getvalue()


def rotated_jpeg(width: int = 80, height: int = 40) -> bytes:
    """A ``width``x``height`` JPEG whose EXIF says "rotate 90° clockwise to view" (orientation 6)."""
    image = Image.new("RGB", (width, height), (10, 120, 200))
    exif = Image.Exif()
    exif[0x0112] = 6
    out = io.BytesIO()
    image.save(out, format="JPEG", exif=exif.tobytes())
    return out.getvalue()


def _chunk(kind: bytes, payload: bytes) -> bytes:
    return struct.pack(">I", len(payload)) + kind + payload + struct.pack(">I", zlib.crc32(kind + payload))


def bomb_png(width: int = 100_000, height: int = 100_000) -> bytes:
    """A few hundred bytes whose PNG header claims ``width``x``height`` pixels: decoding it would need
    gigabytes. Its one IDAT holds a little compressed data; it is never meant to be decoded."""
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + _chunk(b"IHDR", header)
        + _chunk(b"IDAT", zlib.compress(b"\x00" * 1024))
        + _chunk(b"IEND", b"")
    )


def data_uri(data: bytes, content_type: str = "image/png") -> str:
    return f"data:{content_type};base64,{base64.b64encode(data).decode('ascii')}"
