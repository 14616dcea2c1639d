"""Which input images are accepted, and how they are checked: ``check_image``.

The bytes decide, never a file name, URL or declared type: the format is sniffed (JPEG, PNG or WebP
only); more pixels than the limit are refused from the header alone, so a decompression bomb never
reaches the decoder; the image is then decoded in full (a truncated or corrupt one is refused) and its
EXIF orientation applied. Width and height are always after orientation.

What is kept (``CheckedImage.data``): the original bytes when the image is already upright (no EXIF
rotation to apply), so its sha256 is the one its owner can compute; otherwise the upright image
re-encoded as PNG (lossless: no second JPEG generation, and no EXIF left to rotate it again).

Used by the API at create and by ``genworker generate --image``; refusals are ``RequestRejected`` with
``invalid_image`` or ``image_too_large``.
"""

from __future__ import annotations

import hashlib
import io
import warnings
from dataclasses import dataclass

from foundation.core.errors import ErrorCode, RequestRejected

__all__ = ["IMAGE_CONTENT_TYPES", "CheckedImage", "check_image"]

# Pillow's format names -> (content type, file extension); nothing else is accepted.
_FORMATS: dict[str, tuple[str, str]] = {
    "JPEG": ("image/jpeg", "jpg"),
    "PNG": ("image/png", "png"),
    "WEBP": ("image/webp", "webp"),
}
_EXIF_ORIENTATION = 0x0112
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


def check_image(data: bytes, *, max_bytes: int, max_pixels: int, param: str) -> CheckedImage:
    """Sniff, bound, decode and orient ``data``; the image as it will be stored, or a coded refusal."""
    from PIL import Image, ImageOps, UnidentifiedImageError

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
            opened.load()  # the full decode: a truncated or corrupt image fails here
            orientation = opened.getexif().get(_EXIF_ORIENTATION, 1)
            upright = ImageOps.exif_transpose(opened) if orientation not in (1, None) else None
        except (OSError, SyntaxError, ValueError, EOFError, Image.DecompressionBombError) as e:
            raise _reject(ErrorCode.invalid_image, f"the image cannot be decoded: {e}", param) from None
    if fmt not in _FORMATS:  # pragma: no cover - Image.open was limited to these formats
        raise _reject(ErrorCode.invalid_image, "the data is not a JPEG, PNG or WebP image", param)
    if upright is None:
        content_type, extension = _FORMATS[fmt]
        return CheckedImage(data, content_type, extension, hashlib.sha256(data).hexdigest(), width, height)
    return _as_png(upright)


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
