"""The Videos API's create fields read (``api/video_requests.py``) and mapped onto the shipped catalog
(``api/video_mapping.py``): every value a model offers finds its parameter, every other one is a coded refusal
that names the field and the offer."""

from __future__ import annotations

from typing import Any

import pytest

from api.video_mapping import as_video_rejection, offered_sizes, to_create_request
from api.video_requests import parse_video_fields
from foundation.core.catalog import Catalog, load_catalog
from foundation.core.contract import CreateRequest
from foundation.core.errors import ErrorCode, RequestRejected


@pytest.fixture(scope="module")
def catalog() -> Catalog:
    return load_catalog()


def create(catalog: Catalog, *, uploaded: bool = False, **fields: Any) -> CreateRequest:
    fields = {"model": "tiny-wan", "prompt": "a red fox", **fields}
    return to_create_request(parse_video_fields(fields), catalog, uploaded=uploaded)


def refused(catalog: Catalog, code: ErrorCode, param: str, *, uploaded: bool = False, **fields: Any) -> str:
    with pytest.raises(RequestRejected) as caught:
        create(catalog, uploaded=uploaded, **fields)
    assert (caught.value.code, caught.value.param) == (code, param), caught.value
    return caught.value.message


def test_the_sdk_fields_map_onto_the_catalog(catalog: Catalog) -> None:
    made = create(catalog, model="wan2.1-t2v-14b", seconds="4", size="1280x720")
    assert (made.model, made.mode, made.variant) == ("wan2.1-t2v-14b", "text_to_video", "standard")
    params = made.parameters
    assert (params.resolution, params.ratio, params.duration_seconds) == ("720p", "16:9", 4)
    assert made.input.prompt == "a red fox"
    # Nothing given: the catalog's defaults apply later, as for /v1/generations.
    bare = create(catalog)
    assert bare.parameters.resolution is None and bare.parameters.duration_seconds is None
    assert bare.variant == "standard"


def test_every_offered_size_is_found_and_others_are_refused_with_the_offer(catalog: Catalog) -> None:
    for size, (resolution, ratio) in offered_sizes(catalog.models["tiny-wan"]).items():
        made = create(catalog, size=size)
        assert (made.parameters.resolution, made.parameters.ratio) == (resolution, ratio)
    assert create(catalog, size=" 432 X 240 ").parameters.resolution == "240p"
    message = refused(catalog, ErrorCode.invalid_parameter, "size", size="1280x720")
    assert "256x144" in message and "240x320" in message
    refused(catalog, ErrorCode.invalid_parameter, "size", size="wide")


def test_width_and_height_are_a_size(catalog: Catalog) -> None:
    made = create(catalog, width="144", height="256")
    assert (made.parameters.resolution, made.parameters.ratio) == ("144p", "9:16")
    assert create(catalog, width=144, height=256, size="144x256").parameters.ratio == "9:16"
    refused(catalog, ErrorCode.invalid_parameter, "size", width=144, height=256, size="256x144")
    refused(catalog, ErrorCode.invalid_parameter, "height", width=144)
    refused(catalog, ErrorCode.invalid_parameter, "width", width=145, height=256)


def test_seconds_and_num_frames_name_an_offered_duration(catalog: Catalog) -> None:
    assert create(catalog, seconds="3").parameters.duration_seconds == 3
    assert "offered: 1, 2, 3, 4, 5" in refused(catalog, ErrorCode.invalid_parameter, "seconds", seconds=7)
    # tiny-wan: 4 fps, Wan's 4k+1 rule. 8 frames is 2 s as encoded; 9 is what it generates for 2 s.
    assert create(catalog, num_frames=8).parameters.duration_seconds == 2
    assert create(catalog, num_frames="9", fps="4").parameters.duration_seconds == 2
    assert create(catalog, num_frames=9, seconds="2").parameters.duration_seconds == 2
    assert "8 or 9 (2 s)" in refused(catalog, ErrorCode.invalid_parameter, "num_frames", num_frames=10)
    refused(catalog, ErrorCode.invalid_parameter, "num_frames", num_frames=9, seconds=3)
    refused(catalog, ErrorCode.invalid_parameter, "fps", fps=16)
    # vLLM-Omni's Wan example: 81 frames at 16 fps is 5 s.
    assert create(catalog, model="wan2.1-t2v-14b", num_frames=81, fps=16).parameters.duration_seconds == 5


def test_steps_and_guidance_choose_the_variant_whose_recipe_they_are(catalog: Catalog) -> None:
    assert create(catalog, num_inference_steps="2").variant == "fast"
    assert create(catalog, guidance_scale="1.0").variant == "fast"
    assert create(catalog, num_inference_steps=4, guidance_scale=5).variant == "standard"  # cached has it too
    message = refused(catalog, ErrorCode.invalid_parameter, "num_inference_steps", num_inference_steps=3)
    assert "fast: num_inference_steps 2, guidance_scale 1" in message
    refused(catalog, ErrorCode.invalid_parameter, "guidance_scale", num_inference_steps=2, guidance_scale=5.0)
    refused(catalog, ErrorCode.invalid_parameter, "guidance_scale", guidance_scale="nan")


def test_seed_and_negative_prompt_pass_through(catalog: Catalog) -> None:
    made = create(catalog, seed="7", negative_prompt="blurry")
    assert (made.parameters.seed, made.parameters.negative_prompt) == (7, "blurry")
    refused(catalog, ErrorCode.invalid_parameter, "seed", seed=-1)


def test_an_input_reference_makes_it_image_to_video_where_the_model_has_that_mode(catalog: Catalog) -> None:
    uploaded = create(catalog, model="tiny-wan-ti2v", uploaded=True)
    assert (uploaded.mode, uploaded.parameters.ratio) == ("image_to_video", "auto")
    assert create(catalog, model="tiny-wan-ti2v", uploaded=True, size="144x256").parameters.ratio == "9:16"
    by_url = create(catalog, model="tiny-wan-ti2v", input_reference={"image_url": "https://example.com/a.png"})
    assert by_url.input.image_url == "https://example.com/a.png" and by_url.input.image is None
    inline = create(catalog, model="tiny-wan-ti2v", input_reference={"image_url": "DATA:image/png;base64,AAAA"})
    assert inline.input.image == "DATA:image/png;base64,AAAA"
    refused(catalog, ErrorCode.unsupported_parameter, "input_reference", uploaded=True)
    refused(catalog, ErrorCode.unsupported_mode, "input_reference", model="wan2.1-i2v-14b-480p")


def test_unknown_or_badly_typed_fields_are_refused_never_ignored(catalog: Catalog) -> None:
    refused(catalog, ErrorCode.unsupported_parameter, "guidance_scale_2", guidance_scale_2=3)
    message = refused(
        catalog, ErrorCode.unsupported_parameter, "input_reference.file_id", input_reference={"file_id": "f"}
    )
    assert "image_url" in message
    refused(catalog, ErrorCode.invalid_parameter, "seconds", seconds=True)
    refused(catalog, ErrorCode.invalid_parameter, "seconds", seconds="4.5")
    refused(catalog, ErrorCode.invalid_parameter, "model", model=None)
    refused(catalog, ErrorCode.model_not_found, "model", model="sora-2")
    with pytest.raises(RequestRejected) as caught:
        parse_video_fields({"model": "tiny-wan"})
    assert (caught.value.code, caught.value.param) == (ErrorCode.invalid_parameter, "prompt")
    refused(catalog, ErrorCode.invalid_parameter, "prompt", prompt="   ")


def test_refusals_of_the_shared_create_path_name_this_apis_fields() -> None:
    mapped = as_video_rejection(
        RequestRejected(
            ErrorCode.invalid_parameter, "parameters.duration_seconds: too long", "parameters.duration_seconds"
        )
    )
    assert (mapped.param, mapped.message) == ("seconds", "seconds: too long")
    image = as_video_rejection(RequestRejected(ErrorCode.invalid_image, "not an image", "input.image"))
    assert (image.param, image.message) == ("input_reference", "not an image")
    assert as_video_rejection(RequestRejected(ErrorCode.model_not_found, "no", "model")).param == "model"
