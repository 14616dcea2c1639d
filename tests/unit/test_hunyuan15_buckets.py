"""HunyuanVideo 1.5 generates on Tencent's own size buckets, not on our rounded targets, in both modes."""

from __future__ import annotations

import pytest

from foundation.core.catalog import load_catalog
from foundation.core.resolve import generation_size
from pipelines.planning.random_weights import arch_entries

CATALOG = load_catalog()
# Tencent-Hunyuan/HunyuanVideo-1.5 @60783e704160023913bee78f0b47036d393d4dfa: a text job's aspect_ratio ("16:9")
# goes to hyvideo/pipelines/hunyuan_video_pipeline.py get_closest_resolution_given_original_size, which takes the
# bucket of hyvideo/utils/data_utils.py generate_crop_size_list(base, 16) nearest in h/w (480p: base 640,
# 720p: base 960). The (width, height) it returns, run as published:
OFFICIAL_BUCKETS = {
    "480p": {"16:9": (848, 480), "9:16": (480, 848), "1:1": (640, 640), "4:3": (720, 544), "3:4": (544, 720)},
    "720p": {"16:9": (1280, 720), "9:16": (720, 1280), "1:1": (960, 960), "4:3": (1104, 832), "3:4": (832, 1104)},
}


HUNYUAN15 = [
    "hunyuanvideo-1.5-480p",
    "hunyuanvideo-1.5-720p",
    "hunyuanvideo-1.5-i2v-480p",
    "hunyuanvideo-1.5-i2v-720p",
    "hunyuanvideo-1.5-i2v-480p-step-distilled",
]
# The I2V transformers' config.target_size, as configs/arch builds them.
TARGET_SIZE = {
    resolution: arch_entries(f"hunyuanvideo-1.5-i2v-{resolution}")["transformer"]["config"]["target_size"]
    for resolution in ("480p", "720p")
}


@pytest.mark.parametrize("model", HUNYUAN15)
def test_sizes_are_the_official_buckets(model: str) -> None:
    spec = CATALOG.models[model]
    made = {(res, ratio): generation_size(spec, res, ratio) for res in spec.resolutions for ratio in spec.ratios}
    assert made == {(res, ratio): OFFICIAL_BUCKETS[res][ratio] for res, ratio in made}


@pytest.mark.parametrize("resolution", ["480p", "720p"])
def test_an_image_fitted_to_its_bucket_keeps_its_size(resolution: str) -> None:
    """The I2V pipeline sizes the video from the image. diffusers' processor re-buckets an image already at an
    official bucket onto another on two ratios per resolution (its bucket ratios are rounded to five decimals, and
    a portrait image only takes buckets no taller in ratio); the entries' processor keeps the fitted size."""
    from diffusers.pipelines.hunyuan_video1_5.image_processor import HunyuanVideo15ImageProcessor

    from pipelines.families.hunyuan15 import FittedImageProcessor

    diffusers_own, ours = HunyuanVideo15ImageProcessor(), FittedImageProcessor()
    kept, moved = {}, {}
    for ratio, (width, height) in OFFICIAL_BUCKETS[resolution].items():
        kept[ratio] = ours.calculate_default_height_width(height, width, TARGET_SIZE[resolution])[::-1]
        moved[ratio] = diffusers_own.calculate_default_height_width(height, width, TARGET_SIZE[resolution])[::-1]
    assert kept == OFFICIAL_BUCKETS[resolution]
    assert {r for r in moved if moved[r] != OFFICIAL_BUCKETS[resolution][r]} == {
        "9:16",
        "4:3" if resolution == "720p" else "3:4",
    }
    # Off the stride, the processor is diffusers' own.
    assert ours.calculate_default_height_width(1080, 1920, 640) == diffusers_own.calculate_default_height_width(
        1080, 1920, 640
    )


def test_every_i2v_entry_keeps_the_fitted_size() -> None:
    for model in HUNYUAN15:
        spec = CATALOG.models[model]
        assert spec.diffusers is not None
        if "image_to_video" in spec.modes:
            assert spec.diffusers.video_processor == "pipelines.families.hunyuan15:FittedImageProcessor", model
