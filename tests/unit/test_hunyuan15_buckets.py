"""HunyuanVideo 1.5 generates on Tencent's own size buckets, not on our rounded targets."""

from __future__ import annotations

import pytest

from foundation.core.catalog import load_catalog
from foundation.core.resolve import generation_size

CATALOG = load_catalog()
# Tencent-Hunyuan/HunyuanVideo-1.5 @60783e704160023913bee78f0b47036d393d4dfa: a text job's aspect_ratio ("16:9")
# goes to hyvideo/pipelines/hunyuan_video_pipeline.py get_closest_resolution_given_original_size, which takes the
# bucket of hyvideo/utils/data_utils.py generate_crop_size_list(base, 16) nearest in h/w (480p: base 640,
# 720p: base 960). The (width, height) it returns, run as published:
OFFICIAL_BUCKETS = {
    "480p": {"16:9": (848, 480), "9:16": (480, 848), "1:1": (640, 640), "4:3": (720, 544), "3:4": (544, 720)},
    "720p": {"16:9": (1280, 720), "9:16": (720, 1280), "1:1": (960, 960), "4:3": (1104, 832), "3:4": (832, 1104)},
}


@pytest.mark.parametrize("model", ["hunyuanvideo-1.5-480p", "hunyuanvideo-1.5-720p"])
def test_sizes_are_the_official_buckets(model: str) -> None:
    spec = CATALOG.models[model]
    made = {(res, ratio): generation_size(spec, res, ratio) for res in spec.resolutions for ratio in spec.ratios}
    assert made == {(res, ratio): OFFICIAL_BUCKETS[res][ratio] for res, ratio in made}
