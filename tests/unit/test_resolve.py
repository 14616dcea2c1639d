"""Parameter resolution over the whole catalog grid, plus property tests over random requests."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from foundation.core.catalog import ModelSpec, load_catalog
from foundation.core.contract import CreateRequest, parse_create_request
from foundation.core.errors import ErrorCode, RequestRejected
from foundation.core.resolve import frames_for, generation_size, resolve
from foundation.core.sizes import SIZE_TABLE

CATALOG = load_catalog()
REJECTION_CODES = {
    ErrorCode.model_not_found,
    ErrorCode.unsupported_mode,
    ErrorCode.unsupported_variant,
    ErrorCode.invalid_parameter,
    ErrorCode.unsupported_parameter,
    ErrorCode.invalid_request,
}


def request(model: str, *, mode: str = "text_to_video", **params: Any) -> CreateRequest:
    return parse_create_request(
        {
            "model": model,
            "mode": mode,
            "variant": params.pop("variant", "standard"),
            "parameters": params,
            "input": {"prompt": params.pop("prompt", "a lighthouse at dusk")},
        }
    )


GRID = [
    (spec.id, res, ratio, dur)
    for spec in CATALOG.models.values()
    for res in spec.resolutions
    for ratio in spec.ratios
    for dur in spec.durations
]


@pytest.mark.parametrize(("model", "resolution", "ratio", "duration"), GRID)
def test_every_catalog_combination_resolves_to_valid_sizes(
    model: str, resolution: str, ratio: str, duration: int
) -> None:
    spec = CATALOG.models[model]
    mode = next(iter(spec.modes))  # image_to_video-only models resolve the same way (the image is the API's)
    job, hold = resolve(
        request(model, mode=mode, resolution=resolution, ratio=ratio, duration_seconds=duration, seed=7), CATALOG
    )
    assert (job.width, job.height) == SIZE_TABLE[resolution][ratio]
    assert job.gen_width % spec.stride == 0
    assert job.gen_height % spec.stride == 0
    # Within a stride of the target: at or above it, or the size the model's upstream lists instead (at most a
    # stride away: HunyuanVideo 1.5's buckets).
    listed = spec.generation_sizes.get(resolution, {}).get(ratio)
    assert (job.gen_width, job.gen_height) == (listed or (job.gen_width, job.gen_height))
    assert abs(job.gen_width - job.width) <= spec.stride and abs(job.gen_height - job.height) <= spec.stride
    if listed is None:
        assert job.gen_width >= job.width and job.gen_height >= job.height
        assert job.gen_width - job.width < spec.stride and job.gen_height - job.height < spec.stride
    rule = spec.frame_rule
    assert (job.num_frames - rule.offset) % rule.multiple == 0
    assert job.keep_frames == duration * spec.fps
    assert job.keep_frames <= job.num_frames < job.keep_frames + rule.multiple
    assert job.seed == 7
    assert Decimal(hold.amount) > 0


def test_frames_rule_examples() -> None:
    assert frames_for(80, 4, 1) == 81  # Wan 5 s at 16 fps
    assert frames_for(120, 8, 1) == 121  # LTX-2 5 s at 24 fps
    assert frames_for(8, 8, 1) == 9
    assert frames_for(1, 4, 1) == 1


def test_defaults_come_from_the_catalog() -> None:
    job, _ = resolve(request("ltx-2"), CATALOG)
    spec = CATALOG.models["ltx-2"]
    assert job.resolution == spec.defaults["resolution"]
    assert job.duration_seconds == spec.defaults["duration_seconds"]
    assert job.audio is True
    assert job.negative_prompt == spec.negative_prompt


def test_variant_recipe_is_applied() -> None:
    job, _ = resolve(request("wan2.2-t2v-a14b", variant="standard"), CATALOG)
    assert job.steps == 40
    assert job.guidance_scale_2 == 3.0
    assert job.pipeline_kwargs["boundary_ratio"] == 0.875


def test_price_hold_is_decimal_cents() -> None:
    # tiny-ltx2 240p: (0.02 + 0.005 audio) * 5 s = 0.125 -> 0.13 (half up)
    _, hold = resolve(request("tiny-ltx2", resolution="240p", duration_seconds=5, audio=True), CATALOG)
    assert hold.amount == "0.13"
    _, silent = resolve(request("tiny-ltx2", resolution="240p", duration_seconds=5, audio=False), CATALOG)
    assert silent.amount == "0.10"
    _, fast = resolve(request("tiny-wan", resolution="240p", duration_seconds=4, variant="fast"), CATALOG)
    assert fast.amount == "0.04"  # 0.02 * 0.5 * 4


@pytest.mark.parametrize(
    ("model", "params", "code", "param"),
    [
        ("nope", {}, ErrorCode.model_not_found, "model"),
        ("tiny-wan", {"variant": "turbo"}, ErrorCode.unsupported_variant, "variant"),
        ("tiny-wan", {"audio": True}, ErrorCode.unsupported_parameter, "parameters.audio"),
        ("wan2.1-t2v-1.3b", {"resolution": "720p"}, ErrorCode.invalid_parameter, "parameters.resolution"),
        ("tiny-wan", {"duration_seconds": 6}, ErrorCode.invalid_parameter, "parameters.duration_seconds"),
        ("tiny-wan", {"prompt": "x" * 2001}, ErrorCode.invalid_parameter, "input.prompt"),
    ],
)
def test_rejections_carry_code_and_path(model: str, params: dict[str, Any], code: ErrorCode, param: str) -> None:
    with pytest.raises(RequestRejected) as info:
        resolve(request(model, **params), CATALOG)
    assert info.value.code is code
    assert info.value.param == param


def test_unknown_mode_is_refused() -> None:
    req = parse_create_request(
        {
            "model": "tiny-wan",
            "mode": "image_to_video",
            "variant": "standard",
            "parameters": {},
            "input": {"prompt": "x"},
        }
    )
    with pytest.raises(RequestRejected) as info:
        resolve(req, CATALOG)
    assert info.value.code is ErrorCode.unsupported_mode


def test_missing_seed_gets_one() -> None:
    job, _ = resolve(request("tiny-wan"), CATALOG)
    assert 0 <= job.seed < 2**32


_json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**40), max_value=2**40),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),
)
_models = st.sampled_from([*CATALOG.models, "unknown-model", ""])
_params = st.fixed_dictionaries(
    {},
    optional={
        "resolution": st.one_of(st.sampled_from(["144p", "240p", "480p", "720p", "1080p", "999p"]), _json_scalars),
        "duration_seconds": st.one_of(st.integers(min_value=-5, max_value=40), _json_scalars),
        "ratio": st.one_of(st.sampled_from(["16:9", "9:16", "1:1", "4:3", "3:4", "21:9"]), _json_scalars),
        "audio": st.one_of(st.booleans(), _json_scalars),
        "prompt_extend": st.one_of(st.booleans(), _json_scalars),
        "seed": _json_scalars,
        "bogus": _json_scalars,
    },
)
_bodies = st.fixed_dictionaries(
    {
        "model": st.one_of(_models, _json_scalars),
        "mode": st.one_of(st.sampled_from(["text_to_video", "image_to_video"]), _json_scalars),
        "variant": st.one_of(st.sampled_from(["standard", "fast", "turbo"]), _json_scalars),
        "parameters": st.one_of(_params, _json_scalars),
        "input": st.one_of(
            st.fixed_dictionaries({"prompt": st.one_of(st.text(max_size=60), _json_scalars)}), _json_scalars
        ),
    }
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_bodies)
def test_random_requests_resolve_or_reject_with_a_code(data: dict[str, Any]) -> None:
    try:
        job, hold = resolve(parse_create_request(data), CATALOG)
    except RequestRejected as rejected:
        assert rejected.code in REJECTION_CODES
        assert rejected.message
        return
    spec = CATALOG.models[job.model]
    assert job.gen_width % spec.stride == 0 and job.gen_height % spec.stride == 0
    assert job.keep_frames == job.duration_seconds * spec.fps
    assert Decimal(hold.amount) >= 0


def _generated(model: str) -> dict[tuple[str, str], tuple[int, int]]:
    spec = CATALOG.models[model]
    return {(res, ratio): generation_size(spec, res, ratio) for res in spec.resolutions for ratio in spec.ratios}


def test_ti2v_5b_generates_exactly_the_sizes_upstream_lists() -> None:
    """Wan-Video/Wan2.2 @42bf4cfaa384bc21833865abc2f9e6c0e67233dc wan/configs/__init__.py:
    SUPPORTED_SIZES['ti2v-5B'] = ('704*1280', '1280*704') (SIZE_CONFIGS: 'w*h' -> (w, h)), not 1280x736."""
    assert _generated("wan2.2-ti2v-5b") == {("720p", "16:9"): (1280, 704), ("720p", "9:16"): (704, 1280)}


def test_ltx2_720p_generates_1280x704_on_the_two_stage_grid() -> None:
    """1280x720 is on neither the 32 nor the 64 grid; Lightricks' two-stage pipelines need multiples of 64
    (ltx_pipelines/utils/helpers.py assert_resolution, stage 1 at half the size on the VAE's 32): 1280x704 is the
    nearest, where rounding up gave 1280x768 and cropped 48 rows."""
    sizes = _generated("ltx-2")
    assert sizes[("720p", "16:9")] == (1280, 704) and sizes[("720p", "9:16")] == (704, 1280)
    for width, height in sizes.values():
        assert width % 64 == 0 and height % 64 == 0 and (width // 2) % 32 == 0 and (height // 2) % 32 == 0


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"generation_sizes": {"720p": {"16:9": [1280, 672]}}}, "more than a stride from 1280x720"),
        ({"generation_sizes": {"720p": {"16:9": [1280, 700]}}}, "not on the model's stride"),
        ({"generation_sizes": {"720p": {"1:1": [960, 960]}}}, "not offered"),
        ({"modes": {"text_to_video": {"variants": {"standard": {"steps": 2, "guidance_scale": 5.0}}}}}, "image_fit"),
    ],
)
def test_generation_sizes_and_image_fit_are_checked_at_load(changes: dict[str, object], message: str) -> None:
    from pydantic import ValidationError

    data = CATALOG.models["wan2.2-ti2v-5b"].model_dump(mode="json")
    data.update(changes)
    with pytest.raises(ValidationError, match=message):
        ModelSpec.model_validate(data)
