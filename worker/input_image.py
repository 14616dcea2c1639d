"""The input image of an ``image_to_video`` job: read the stored copy, check it, fit it to the generation.

The API fetched and checked the image at create and stored it in the artifact store (``StoredImage``);
a worker reads only that copy, so GPU nodes need no internet and a retry never refetches. Before use the
bytes must be exactly the ones recorded (size and sha256): a mismatch or a missing object fails the job
with ``input_image_corrupt`` at once, because no retry can make those bytes right.

Fitting: EXIF orientation applied (the recorded width and height are after it), converted to RGB, then
center-cropped to the aspect of the generation size and resized to it with Lanczos. What that crops depends on
the model (``foundation.core.resolve.generation_size``, the catalog's ``image_fit``):
- a model that keeps the image's aspect (Wan I2V's ``max_area``, TI2V-5B's ``best_output_size``, as upstream)
  generates at the image's aspect, rounded to its stride: the crop is the rounding alone (less than a stride;
  where upstream Wan stretches by that much, this crops it, so nothing is distorted), the model sees the whole
  image, and the encoder then crops the video to the requested ratio and scales it to the requested size;
- a model that does not (LTX-2, which upstream also crops) generates at the requested ratio, so the image is
  center-cropped to it here.
"""

from __future__ import annotations

import hashlib
import io
import warnings
from typing import TYPE_CHECKING

from foundation.core.errors import ErrorCode, JobError

if TYPE_CHECKING:
    from PIL.Image import Image

    from foundation.core.contract import StoredImage
    from foundation.core.resolve import ResolvedJob
    from foundation.stores.base import ArtifactStore

__all__ = ["check_image_bytes", "decode_image", "fit_image", "load_input_image"]


def load_input_image(store: ArtifactStore, job: ResolvedJob) -> Image | None:
    """The job's input image, checked and fitted to ``(gen_width, gen_height)``; None for a job without one."""
    stored = job.image
    if stored is None:
        return None
    data = store.read_bytes(stored.key, max_bytes=stored.bytes + 1)
    if data is None:
        raise JobError(ErrorCode.input_image_corrupt, f"input image {stored.key} is not in the artifact store")
    check_image_bytes(data, stored)
    return fit_image(decode_image(data), job.gen_width, job.gen_height)


def check_image_bytes(data: bytes, stored: StoredImage) -> None:
    """Refuse bytes that are not the ones the API recorded (size, then sha256)."""
    if len(data) != stored.bytes:
        raise JobError(
            ErrorCode.input_image_corrupt,
            f"input image {stored.key} has {len(data)}{'+' if len(data) > stored.bytes else ''} bytes, "
            f"recorded {stored.bytes}",
        )
    digest = hashlib.sha256(data).hexdigest()
    if digest != stored.sha256:
        raise JobError(
            ErrorCode.input_image_corrupt, f"input image {stored.key} has sha256 {digest}, recorded {stored.sha256}"
        )


def decode_image(data: bytes) -> Image:
    """Decode checked bytes into an upright RGB image (EXIF orientation applied)."""
    from PIL import Image as PILImage
    from PIL import ImageOps, UnidentifiedImageError

    try:
        with warnings.catch_warnings():
            # The API refused oversized images at create; this copy passed its sha256, so it is that image.
            warnings.simplefilter("ignore", PILImage.DecompressionBombWarning)
            with PILImage.open(io.BytesIO(data)) as opened:
                upright = ImageOps.exif_transpose(opened)
                return upright.convert("RGB")
    except (UnidentifiedImageError, PILImage.DecompressionBombError, OSError, ValueError) as e:
        raise JobError(ErrorCode.input_image_corrupt, f"input image cannot be decoded: {e}") from e


def fit_image(image: Image, width: int, height: int) -> Image:
    """Center-crop ``image`` to the aspect of ``width``x``height``, then resize it to exactly that size (covering it:
    nothing is stretched)."""
    from PIL import Image as PILImage

    src_w, src_h = image.size
    if src_w * height > src_h * width:  # wider than the target: crop the sides
        crop_w, crop_h = max(1, round(src_h * width / height)), src_h
    else:  # taller (or equal): crop top and bottom
        crop_w, crop_h = src_w, max(1, round(src_w * height / width))
    left, top = (src_w - crop_w) // 2, (src_h - crop_h) // 2
    cropped = image.crop((left, top, left + crop_w, top + crop_h))
    if cropped.size == (width, height):
        return cropped
    return cropped.resize((width, height), PILImage.Resampling.LANCZOS)
