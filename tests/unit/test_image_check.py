"""``check_image``: sniffed by content, bombs refused from the header, truncation refused, EXIF applied, decoded
no larger than the generation size needs."""

from __future__ import annotations

import hashlib
import io

import pytest
from PIL import Image, ImageChops, ImageOps, ImageStat

from foundation.core.errors import ErrorCode, RequestRejected
from foundation.core.images import check_image
from foundation.core.sizes import target_size
from foundation.settings import InputSettings
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


def _halves(width: int, height: int, orientation: int) -> bytes:
    """A JPEG, left half red and right half blue as stored, whose EXIF says how to turn it upright."""
    image = Image.new("RGB", (width, height), (220, 20, 20))
    image.paste((20, 20, 220), (width // 2, 0, width, height))
    exif = Image.Exif()
    exif[0x0112] = orientation
    out = io.BytesIO()
    image.save(out, format="JPEG", quality=90, exif=exif.tobytes())
    return out.getvalue()


def test_the_default_pixel_cap_is_what_the_largest_generation_needs() -> None:
    cap = InputSettings().max_image_pixels
    largest = max(w * h for w, h in (target_size(r, a) for r in ("1080p",) for a in ("16:9", "1:1", "4:3")))
    assert 4 * largest <= cap <= 16_000_000  # room to crop the largest size offered, no more
    error = _refused(bomb_png(5_000, 4_000), max_pixels=cap)  # 20 MP: refused from the header
    assert error.code is ErrorCode.image_too_large and "pixels" in error.message


@pytest.mark.parametrize("orientation", [6, 8, 3])
def test_a_turned_image_is_decoded_and_stored_at_about_the_generation_size(orientation: int) -> None:
    data = _halves(4_000, 3_000, orientation)
    limits = {**LIMITS, "max_pixels": 16_000_000}
    checked = check_image(data, **limits, cover=lambda w, h: (1280, 720))  # type: ignore[arg-type]
    # Both are narrower than 16:9, so the crop keeps the width: 3000 (upright portrait) or 4000 -> 1280.
    expected = (1280, 1707) if orientation in (6, 8) else (1280, 960)
    assert (checked.width, checked.height) == expected
    with Image.open(io.BytesIO(data)) as full:
        reference = ImageOps.exif_transpose(full).resize(expected, Image.Resampling.LANCZOS)
    with Image.open(io.BytesIO(checked.data)) as stored:
        diff = ImageChops.difference(stored.convert("RGB"), reference.convert("RGB"))
        assert max(ImageStat.Stat(diff).mean) < 4  # the same picture, turned the same way


def test_an_upright_image_decoded_small_is_still_kept_as_sent_and_still_checked() -> None:
    data = _halves(1_600, 1_200, orientation=1)
    checked = check_image(data, **LIMITS, cover=lambda w, h: (256, 144))  # type: ignore[arg-type]
    assert checked.data == data and (checked.width, checked.height) == (1_600, 1_200)
    noisy = Image.effect_noise((1_600, 1_200), 64).convert("RGB")
    out = io.BytesIO()
    noisy.save(out, format="JPEG", quality=90)
    truncated = out.getvalue()[: len(out.getvalue()) // 2]
    with pytest.raises(RequestRejected) as caught:
        check_image(truncated, **LIMITS, cover=lambda w, h: (256, 144))  # type: ignore[arg-type]
    assert caught.value.code is ErrorCode.invalid_image  # a draft decode still reads every byte
