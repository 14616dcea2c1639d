"""Image-to-video keeps the input image's aspect, as upstream Wan does: the generation size follows the image
(``foundation.core.sizes``, chosen by the catalog's ``image_fit``), checked against upstream's own arithmetic; the
requested ratio and size are the output's (the encoder crops and scales: ``foundation.media.frames.output_box``)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from foundation.core.catalog import load_catalog
from foundation.core.contract import StoredImage, parse_create_request
from foundation.core.resolve import ResolvedJob, resolve
from foundation.core.sizes import MAX_IMAGE_ASPECT, best_output_size, max_area_size, target_size
from foundation.media.frames import output_box

CATALOG = load_catalog()


def upstream_wan_i2v(w: int, h: int, max_area: int) -> tuple[int, int]:
    """Wan-Video/Wan2.1 @9737cba9 and Wan2.2 @42bf4cf wan/image2video.py (the same lines in both): the size of
    an input image h x w within max_area, vae_stride 8 and patch 2 (numpy's sqrt and floor divisions, as there)."""
    aspect_ratio = h / w
    lat_h = round(math.sqrt(max_area * aspect_ratio) // 8 // 2 * 2)
    lat_w = round(math.sqrt(max_area / aspect_ratio) // 8 // 2 * 2)
    return lat_w * 8, lat_h * 8


def upstream_best_output_size(w: int, h: int, dw: int, dh: int, expected_area: int) -> tuple[int, int]:
    """Wan-Video/Wan2.2 @42bf4cf wan/utils/utils.py best_output_size, as TI2V-5B's textimage2video.py calls it."""
    ratio = w / h
    ow = (expected_area * ratio) ** 0.5
    oh = expected_area / ow
    ow1 = int(ow // dw * dw)
    oh1 = int(expected_area / ow1 // dh * dh)
    ratio1 = ow1 / oh1
    oh2 = int(oh // dh * dh)
    ow2 = int(expected_area / oh2 // dw * dw)
    ratio2 = ow2 / oh2
    if max(ratio / ratio1, ratio1 / ratio) < max(ratio / ratio2, ratio2 / ratio):
        return ow1, oh1
    return ow2, oh2


AREAS = [832 * 480, 1280 * 720, 1280 * 704, 624 * 624, 736 * 544, 256 * 144]
SIDES = st.integers(min_value=64, max_value=4096)


@given(SIDES, SIDES, st.sampled_from(AREAS))
def test_max_area_is_upstream_wan_i2v(w: int, h: int, area: int) -> None:
    if 1 / MAX_IMAGE_ASPECT <= w / h <= MAX_IMAGE_ASPECT:
        assert max_area_size(w, h, area, 16) == upstream_wan_i2v(w, h, area)


@given(SIDES, SIDES, st.sampled_from(AREAS))
def test_best_output_size_is_upstream_ti2v(w: int, h: int, area: int) -> None:
    if 1 / MAX_IMAGE_ASPECT <= w / h <= MAX_IMAGE_ASPECT:
        assert best_output_size(w, h, area, 32) == upstream_best_output_size(w, h, 32, 32, area)


@pytest.mark.parametrize(("w", "h"), [(10_000, 100), (100, 10_000), (4097, 1)])
def test_an_extreme_image_is_generated_at_four_to_one_not_at_a_zero_side(w: int, h: int) -> None:
    for fit, stride in ((max_area_size, 16), (best_output_size, 32)):
        gw, gh = fit(w, h, 832 * 480, stride)
        assert gw >= stride and gh >= stride and gw * gh <= 832 * 480
        assert max(gw / gh, gh / gw) == pytest.approx(MAX_IMAGE_ASPECT, rel=0.15)


def _image_job(model: str, width: int, height: int, **params: object) -> ResolvedJob:
    spec = CATALOG.models[model]
    request = parse_create_request(
        {
            "model": model,
            "mode": "image_to_video",
            "variant": "standard",
            "parameters": {"seed": 1, "resolution": spec.resolutions[0], **params},
            "input": {"prompt": "the scene comes alive", "image": "data:image/png;base64,AAAA"},
        }
    )
    image = StoredImage(key="k", content_type="image/png", bytes=4, sha256="0" * 64, width=width, height=height)
    job, _hold = resolve(request, CATALOG, image=image)
    return job


@pytest.mark.parametrize(
    ("model", "image", "ratio", "generated"),
    [
        # Upstream's own figures (Wan I2V 480p: 832*480 max area; TI2V-5B: 1280*704):
        ("wan2.1-i2v-14b-480p", (1920, 1080), "16:9", (832, 464)),
        ("wan2.1-i2v-14b-480p", (1024, 768), "16:9", (720, 544)),  # a 4:3 image asked as 16:9: still 4:3
        ("wan2.1-i2v-14b-480p", (1000, 1000), "9:16", (624, 624)),
        ("wan2.1-i2v-14b-720p", (1024, 768), "16:9", (1104, 816)),
        ("wan2.2-i2v-a14b", (1024, 768), "16:9", (720, 544)),  # its 480p
        ("wan2.2-ti2v-5b", (1920, 1080), "16:9", (1248, 704)),
        ("wan2.2-ti2v-5b", (1024, 768), "16:9", (1088, 800)),
        ("wan2.2-ti2v-5b", (1000, 1000), "9:16", (960, 928)),
        # The area is upstream's --size's whatever ratio is asked (Wan2.1 @9737cba9 generate.py:432, Wan2.2
        # @42bf4cf generate.py:533, max_area=MAX_AREA_CONFIGS[args.size]), not the 1:1, 4:3 or 3:4 size's:
        ("wan2.1-i2v-14b-480p", (1024, 768), "1:1", (720, 544)),
        ("wan2.2-i2v-a14b", (768, 1024), "1:1", (544, 720)),
        ("wan2.1-i2v-14b-720p", (1024, 768), "4:3", (1104, 816)),
        ("wan2.1-i2v-14b-720p", (1000, 1000), "3:4", (960, 960)),
        # LTX-2 crops the image to the generation size, as ltx_pipelines does: the size is the ratio's.
        ("ltx-2", (1024, 768), "16:9", (832, 512)),
    ],
)
def test_an_image_job_generates_at_the_images_aspect_and_outputs_the_asked_size(
    model: str, image: tuple[int, int], ratio: str, generated: tuple[int, int]
) -> None:
    job = _image_job(model, *image, ratio=ratio)
    assert (job.gen_width, job.gen_height) == generated
    assert (job.width, job.height) == target_size(job.resolution, ratio)  # the output: the asked offered size
    # The encoder's window of the generated video: the requested ratio, scaled to the requested size.
    box = output_box(job.gen_width, job.gen_height, job.width, job.height)
    assert abs(box.width / box.height - job.width / job.height) < 2 / min(box.width, box.height)
