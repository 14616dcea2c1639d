"""Output sizes (width, height) by resolution label and aspect ratio, as DESIGN.md fixes them."""

from __future__ import annotations

__all__ = ["RATIOS", "SIZE_TABLE", "target_size"]

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
