"""Which input images are accepted, and how they are checked: ``check_image``.

The bytes decide, never a file name, URL or declared type: the format is sniffed (JPEG, PNG or WebP
only); more pixels than the limit are refused from the header alone, so a decompression bomb never
reaches the decoder; the image is then decoded (a truncated or corrupt one is refused) and its EXIF
orientation applied. Width and height are always after orientation.

Decoded no larger than the generation needs: given ``cover`` (the size the job will be fitted to), a
JPEG is decoded at the smallest DCT scale (1/2, 1/4, 1/8) that still covers it (``Image.draft``: every
byte is still decoded, so a corrupt one is still caught, at a fraction of the memory and time); a PNG or
WebP is decoded whole, under the pixel cap. An image that must be turned upright is first resized to
about the ``cover`` size (``reduce`` then Lanczos), so the turn and the PNG encode are cheap: a 16 MP
JPEG for a 720p job costs a quarter of its full decode, and turning it about a tenth.

What is kept (``CheckedImage.data``): the original bytes when the image is already upright (no EXIF
rotation to apply), so its sha256 is the one its owner can compute; otherwise the upright image, at about
the ``cover`` size, re-encoded as PNG (lossless: no second JPEG generation, and no EXIF left to
rotate it again).

Used by the API at create and by ``genworker generate --image``; refusals are ``RequestRejected`` with
``invalid_image`` or ``image_too_large``.
"""

from __future__ import annotations

import hashlib
import io
import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from foundation.core.errors import ErrorCode, RequestRejected

if TYPE_CHECKING:
    from PIL.Image import Image as PILImage

__all__ = ["IMAGE_CONTENT_TYPES", "CheckedImage", "Cover", "check_image"]

# The upright (width, height) of an image -> the size it will be fitted to: the decode must still cover it.
Cover = Callable[[int, int], tuple[int, int]]

# Pillow's format names -> (content type, file extension); nothing else is accepted.
_FORMATS: dict[str, tuple[str, str]] = {
    "JPEG": ("image/jpeg", "jpg"),
    "PNG": ("image/png", "png"),
    "WEBP": ("image/webp", "webp"),
}
_EXIF_ORIENTATION = 0x0112
_SWAPS_AXES = frozenset({5, 6, 7, 8})  # EXIF orientations that turn the image a quarter
# EXIF orientation -> the transpose that makes it upright (as ImageOps.exif_transpose maps them), applied
# here to the reduced image, which no longer carries the EXIF that exif_transpose reads.
_TRANSPOSE = {
    2: "FLIP_LEFT_RIGHT",
    3: "ROTATE_180",
    4: "FLIP_TOP_BOTTOM",
    5: "TRANSPOSE",
    6: "ROTATE_270",
    7: "TRANSVERSE",
    8: "ROTATE_90",
}
_PNG_MODES = frozenset({"1", "L", "LA", "I", "I;16", "P", "RGB", "RGBA"})


IMAGE_CONTENT_TYPES = frozenset(content_type for content_type, _ in _FORMATS.values())


@dataclass(frozen=True)
class CheckedImage:
    """An input image that passed every check, as it will be stored."""

    data: bytes
    content_type: str
    extension: str
    sha256: str
    width: int  # after EXIF orientation
    height: int


def _reject(code: ErrorCode, message: str, param: str) -> RequestRejected:
    return RequestRejected(code, message, param)


def check_image(
    data: bytes, *, max_bytes: int, max_pixels: int, param: str, cover: Cover | None = None
) -> CheckedImage:
    """Sniff, bound, decode and orient ``data``; the image as it will be stored, or a coded refusal.
    ``cover``: decode no larger than needed to cover the size it gives (module docstring); None: in full."""
    from PIL import Image, UnidentifiedImageError

    if len(data) > max_bytes:
        raise _reject(ErrorCode.image_too_large, f"the image is larger than {max_bytes} bytes", param)
    if not data:
        raise _reject(ErrorCode.invalid_image, "the image is empty", param)
    try:
        with warnings.catch_warnings():
            # Pillow warns (and past twice its own limit raises) from the header alone; either is a bomb here.
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            opened = Image.open(io.BytesIO(data), formats=list(_FORMATS))
    except (Image.DecompressionBombError, Image.DecompressionBombWarning):
        raise _reject(ErrorCode.image_too_large, f"the image has more than {max_pixels} pixels", param) from None
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError):
        raise _reject(ErrorCode.invalid_image, "the data is not a JPEG, PNG or WebP image", param) from None
    with opened:
        fmt = opened.format or ""
        width, height = opened.size
        if width * height > max_pixels:  # from the header: nothing decoded yet
            raise _reject(
                ErrorCode.image_too_large,
                f"the image is {width}x{height}, more than {max_pixels} pixels",
                param,
            )
        try:
            upright = _decode(opened, cover)
        except (OSError, SyntaxError, ValueError, EOFError, Image.DecompressionBombError) as e:
            raise _reject(ErrorCode.invalid_image, f"the image cannot be decoded: {e}", param) from None
    if fmt not in _FORMATS:  # pragma: no cover - Image.open was limited to these formats
        raise _reject(ErrorCode.invalid_image, "the data is not a JPEG, PNG or WebP image", param)
    if upright is None:
        content_type, extension = _FORMATS[fmt]
        return CheckedImage(data, content_type, extension, hashlib.sha256(data).hexdigest(), width, height)
    return _as_png(upright)


def _decode(opened: PILImage, cover: Cover | None) -> PILImage | None:
    """Decode ``opened`` (a truncated or corrupt image raises here) no larger than ``cover`` needs; the
    upright image, about the ``cover`` size, when EXIF says to turn it, else None (the bytes are kept)."""
    from PIL import Image

    width, height = opened.size  # from the header: nothing decoded yet
    orientation = opened.getexif().get(_EXIF_ORIENTATION, 1)  # from the header too
    turned = orientation in _SWAPS_AXES
    upright_w, upright_h = (height, width) if turned else (width, height)
    scale = _cover_scale((upright_w, upright_h), cover(upright_w, upright_h)) if cover is not None else 1.0
    # The size that still covers, in the stored (unturned) axes.
    size = (max(1, math.ceil(width * scale)), max(1, math.ceil(height * scale)))
    if scale < 1 and opened.format == "JPEG":
        opened.draft(None, size)  # Pillow picks the smallest DCT scale at or above ``size``
    opened.load()
    if orientation not in _TRANSPOSE:
        return None
    # Only what is re-encoded is resized: to about the generation size, so the turn and the PNG are cheap.
    shrunk = opened.resize(size, Image.Resampling.LANCZOS, reducing_gap=2.0) if opened.size != size else opened
    return shrunk.transpose(Image.Transpose[_TRANSPOSE[orientation]])


def _cover_scale(size: tuple[int, int], cover: tuple[int, int]) -> float:
    """The smallest scale (at most 1) at which the image still covers ``cover`` once center-cropped to its
    aspect, as the worker fits it: the side the crop keeps whole must stay at least the target's."""
    (width, height), (target_w, target_h) = size, cover
    if target_w <= 0 or target_h <= 0:
        return 1.0
    if width * target_h > height * target_w:  # wider than the target: the crop keeps the height
        return min(1.0, target_h / height)
    return min(1.0, target_w / width)


def _as_png(image: object) -> CheckedImage:
    """The upright image re-encoded losslessly (PNG), without the EXIF that would rotate it again."""
    from PIL import Image

    assert isinstance(image, Image.Image)
    if image.mode not in _PNG_MODES:
        image = image.convert("RGBA" if "A" in image.mode else "RGB")
    out = io.BytesIO()
    image.save(out, format="PNG")
    data = out.getvalue()
    return CheckedImage(data, "image/png", "png", hashlib.sha256(data).hexdigest(), image.width, image.height)
