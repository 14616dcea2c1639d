"""Output sizes (width, height) by resolution label and aspect ratio, as DESIGN.md fixes them, and the generation
sizes of image-to-video jobs that keep the input image's aspect (the two rules upstream Wan uses)."""

from __future__ import annotations

import math

__all__ = ["MAX_IMAGE_ASPECT", "RATIOS", "SIZE_TABLE", "best_output_size", "max_area_size", "target_size"]

RATIOS: tuple[str, ...] = ("16:9", "9:16", "1:1", "4:3", "3:4")

SIZE_TABLE: dict[str, dict[str, tuple[int, int]]] = {
    "144p": {"16:9": (256, 144), "9:16": (144, 256), "1:1": (144, 144), "4:3": (192, 144), "3:4": (144, 192)},
    "240p": {"16:9": (432, 240), "9:16": (240, 432), "1:1": (240, 240), "4:3": (320, 240), "3:4": (240, 320)},
    "480p": {"16:9": (832, 480), "9:16": (480, 832), "1:1": (624, 624), "4:3": (736, 544), "3:4": (544, 736)},
    "720p": {"16:9": (1280, 720), "9:16": (720, 1280), "1:1": (960, 960), "4:3": (1088, 832), "3:4": (832, 1088)},
    "1080p": {
        "16:9": (1920, 1080),
        "9:16": (1080, 1920),
        "1:1": (1440, 1440),
        "4:3": (1632, 1248),
        "3:4": (1248, 1632),
    },
}


def target_size(resolution: str, ratio: str) -> tuple[int, int]:
    """The exact (width, height) the client receives for a resolution label and ratio."""
    return SIZE_TABLE[resolution][ratio]


# An input image more elongated than 4:1 (either way) is generated at 4:1 and its ends cropped: upstream has no bound,
# and far enough out a side rounds to zero.
MAX_IMAGE_ASPECT = 4.0


def _within(ratio: float) -> float:
    """An image's side ratio, within ``MAX_IMAGE_ASPECT`` either way."""
    return min(max(ratio, 1 / MAX_IMAGE_ASPECT), MAX_IMAGE_ASPECT)


def max_area_size(image_width: int, image_height: int, max_area: int, stride: int) -> tuple[int, int]:
    """Wan 2.1/2.2 image-to-video (``wan/image2video.py``): the size of the image's aspect with ``max_area``
    pixels, each side floored to the stride: h = floor(sqrt(A * h/w) / stride) * stride, w = floor(sqrt(A * w/h)
    / stride) * stride (computed in upstream's order, so rounding at a stride's edge falls the same way)."""
    aspect = _within(image_height / image_width)
    height = int(math.sqrt(max_area * aspect) // stride) * stride
    width = int(math.sqrt(max_area / aspect) // stride) * stride
    return max(width, stride), max(height, stride)


def best_output_size(image_width: int, image_height: int, max_area: int, stride: int) -> tuple[int, int]:
    """Wan 2.2 TI2V-5B (``wan/utils/utils.py`` ``best_output_size``): of the two stride-grid sizes within
    ``max_area`` (width rounded first, or height first), the one whose aspect is closer to the image's."""
    ratio = _within(image_width / image_height)
    exact_width = (max_area * ratio) ** 0.5
    exact_height = max_area / exact_width
    width_1 = max(int(exact_width // stride) * stride, stride)
    height_1 = max(int(max_area / width_1 // stride) * stride, stride)
    height_2 = max(int(exact_height // stride) * stride, stride)
    width_2 = max(int(max_area / height_2 // stride) * stride, stride)
    ratio_1, ratio_2 = width_1 / height_1, width_2 / height_2
    if max(ratio / ratio_1, ratio_1 / ratio) < max(ratio / ratio_2, ratio_2 / ratio):
        return width_1, height_1
    return width_2, height_2
