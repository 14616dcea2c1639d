"""``check_image``: sniffed by content, bombs refused from the header, truncation refused, EXIF applied."""

from __future__ import annotations

import hashlib
import io

import pytest
from PIL import Image

from foundation.core.errors import ErrorCode, RequestRejected
from foundation.core.images import check_image
from tests.image_samples import bomb_png, image_bytes, rotated_jpeg

LIMITS = {"max_bytes": 5_000_000, "max_pixels": 4_000_000, "param": "input.image"}


@pytest.mark.parametrize(
    ("fmt", "content_type"), [("JPEG", "image/jpeg"), ("PNG", "image/png"), ("WEBP", "image/webp")]
)
def test_accepted_formats_are_kept_as_they_are(fmt: str, content_type: str) -> None:
    data = image_bytes(64, 48, fmt)
    checked = check_image(data, **LIMITS)
    assert (checked.content_type, checked.width, checked.height) == (content_type, 64, 48)
    assert checked.data == data and checked.sha256 == hashlib.sha256(data).hexdigest()


def _refused(data: bytes, **limits: object) -> RequestRejected:
    with pytest.raises(RequestRejected) as caught:
        check_image(data, **{**LIMITS, **limits})  # type: ignore[arg-type]
    assert caught.value.param == "input.image"
    return caught.value


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"this is not an image at all",
        image_bytes(fmt="GIF"),  # a real image, in a format we do not take
        image_bytes(fmt="BMP"),
        b"%PDF-1.7\n" + b"0" * 100,
    ],
)
def test_what_is_not_jpeg_png_or_webp_is_invalid_image(data: bytes) -> None:
    assert _refused(data).code is ErrorCode.invalid_image


@pytest.mark.parametrize("fmt", ["JPEG", "PNG", "WEBP"])
def test_a_truncated_image_is_invalid_image(fmt: str) -> None:
    data = image_bytes(200, 150, fmt)
    assert _refused(data[: len(data) // 2]).code is ErrorCode.invalid_image


@pytest.mark.parametrize("size", [(100_000, 100_000), (10_000, 10_000), (3_000, 2_000)])
def test_a_bomb_is_refused_from_its_header(size: tuple[int, int]) -> None:
    # 10^10 pixels trips Pillow's own error, 10^8 its warning, 6*10^6 only our cap: each is image_too_large.
    data = bomb_png(*size)
    assert len(data) < 200
    error = _refused(data)
    assert error.code is ErrorCode.image_too_large


def test_pixel_and_byte_caps_are_the_settings() -> None:
    data = image_bytes(64, 48)
    assert _refused(data, max_pixels=64 * 48 - 1).code is ErrorCode.image_too_large
    assert _refused(data, max_bytes=len(data) - 1).code is ErrorCode.image_too_large
    assert check_image(data, **{**LIMITS, "max_pixels": 64 * 48, "max_bytes": len(data)}).width == 64  # type: ignore[arg-type]


def test_exif_orientation_is_applied_and_stored_as_png() -> None:
    data = rotated_jpeg(80, 40)
    checked = check_image(data, **LIMITS)
    assert (checked.width, checked.height) == (40, 80)  # rotated upright
    assert checked.content_type == "image/png" and checked.extension == "png"
    assert checked.sha256 == hashlib.sha256(checked.data).hexdigest()
    with Image.open(io.BytesIO(checked.data)) as stored:
        assert stored.size == (40, 80)
        assert stored.getexif().get(0x0112) in (None, 1)  # nothing left to rotate it again
