"""The request side of image_to_video: which mode takes an image, ``ratio: auto``, the fingerprint."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest

from api.create import build_record, request_hash
from foundation.core.catalog import MODE_INPUTS, load_catalog
from foundation.core.contract import parse_create_request
from foundation.core.errors import ErrorCode, RequestRejected
from foundation.core.images import check_image
from foundation.core.resolve import check_inputs, nearest_ratio
from tests.image_samples import image_bytes

CATALOG = load_catalog()


def body(mode: str = "image_to_video", model: str = "tiny-ltx2", **inputs: Any) -> dict[str, Any]:
    return {
        "model": model,
        "mode": mode,
        "variant": "standard",
        "parameters": {"resolution": "144p", "duration_seconds": 1, "ratio": "auto" if inputs else "16:9"},
        "input": {"prompt": "a lighthouse", **inputs},
    }


def test_the_table_names_what_each_mode_needs() -> None:
    assert MODE_INPUTS == {"text_to_video": ("prompt",), "image_to_video": ("prompt", "image")}


@pytest.mark.parametrize(
    ("request_body", "code", "param"),
    [
        (
            body("text_to_video", image_url="https://example.com/a.png"),
            ErrorCode.unsupported_parameter,
            "input.image_url",
        ),
        (body("text_to_video", image="data:image/png;base64,AAAA"), ErrorCode.unsupported_parameter, "input.image"),
        (body(), ErrorCode.invalid_parameter, "input.image"),
        (
            body(image_url="https://example.com/a.png", image="data:image/png;base64,AAAA"),
            ErrorCode.invalid_parameter,
            "input.image",
        ),
        (body(model="no-such", image_url="https://example.com/a.png"), ErrorCode.model_not_found, "model"),
    ],
)
def test_inputs_that_do_not_fit_the_mode_are_refused(request_body: dict[str, Any], code: ErrorCode, param: str) -> None:
    with pytest.raises(RequestRejected) as caught:
        check_inputs(parse_create_request(request_body), CATALOG)
    assert (caught.value.code, caught.value.param) == (code, param)


def test_check_inputs_says_whether_an_image_comes() -> None:
    assert check_inputs(parse_create_request(body(image_url="https://example.com/a.png")), CATALOG) is True
    assert check_inputs(parse_create_request(body("text_to_video")), CATALOG) is False


@pytest.mark.parametrize(
    ("size", "ratio"),
    [((1920, 1080), "16:9"), ((1080, 1920), "9:16"), ((500, 500), "1:1"), ((1024, 768), "4:3"), ((600, 800), "3:4"),
     ((3000, 1000), "16:9"), ((100, 200), "9:16"), ((1100, 1000), "1:1")],
)  # fmt: skip
def test_nearest_ratio(size: tuple[int, int], ratio: str) -> None:
    assert nearest_ratio(["16:9", "9:16", "1:1", "4:3", "3:4"], *size) == ratio


def test_ratio_auto_is_resolved_from_the_image_and_recorded() -> None:
    checked = check_image(image_bytes(60, 120), max_bytes=10**6, max_pixels=10**6, param="input.image")
    request = parse_create_request(body(image="data:image/png;base64,AAAA"))
    record = build_record(request, CATALOG, project="p", max_attempts=2, image=checked)
    assert record.parameters.ratio == "9:16"
    stored = record.input.image
    assert stored is not None and stored.key == f"generations/{record.id}/input/image.png"
    assert (stored.width, stored.height, stored.sha256) == (60, 120, checked.sha256)


def test_ratio_auto_without_an_image_is_refused() -> None:
    request = parse_create_request({**body("text_to_video"), "parameters": {"ratio": "auto"}})
    with pytest.raises(RequestRejected) as caught:
        build_record(request, CATALOG, project="p", max_attempts=2)
    assert (caught.value.code, caught.value.param) == (ErrorCode.invalid_parameter, "parameters.ratio")


def test_the_fingerprint_counts_the_image_by_content() -> None:
    by_url = parse_create_request(body(image_url="https://example.com/a.png"))
    by_uri = parse_create_request(body(image="data:image/png;base64,AAAA"))
    assert request_hash(by_url, image_sha256="a" * 64) == request_hash(by_uri, image_sha256="a" * 64)
    assert request_hash(by_url, image_sha256="a" * 64) != request_hash(by_url, image_sha256="b" * 64)
    # A text request hashes as before images existed: keys reserved by an older API still replay.
    text = parse_create_request(body("text_to_video"))
    later = {"webhook_url": True, "webhook_events": True, "parameters": {"preview"}}  # fields added since
    legacy = text.model_dump(mode="json", exclude=later)
    legacy["input"] = {"prompt": text.input.prompt}
    assert request_hash(text.model_copy(update={"webhook_url": "https://example.com/hook"})) != request_hash(text)
    canonical = json.dumps(legacy, sort_keys=True, separators=(",", ":"))
    assert request_hash(text) == hashlib.sha256(canonical.encode()).hexdigest()
