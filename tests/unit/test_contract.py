"""Job contract: statuses and transitions, strict requests, lenient records."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from foundation.core.contract import TERMINAL, GenerationRecord, Money, Status, check_transition, parse_create_request
from foundation.core.errors import ErrorCode, IllegalTransition, RequestRejected

LEGAL = {
    (Status.queued, Status.running),
    (Status.queued, Status.canceled),
    (Status.queued, Status.failed),
    (Status.running, Status.succeeded),
    (Status.running, Status.failed),
    (Status.running, Status.canceled),
    (Status.running, Status.queued),
}


def body(**overrides: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "model": "tiny-wan",
        "mode": "text_to_video",
        "variant": "standard",
        "parameters": {
            "resolution": "144p",
            "duration_seconds": 2,
            "ratio": "16:9",
            "audio": False,
            "prompt_extend": False,
        },
        "input": {"prompt": "a red fox in snow"},
    }
    data.update(overrides)
    return data


@pytest.mark.parametrize(("current", "new"), sorted(LEGAL))
def test_legal_transitions_pass(current: Status, new: Status) -> None:
    check_transition(current, new)


@pytest.mark.parametrize(("current", "new"), [p for p in itertools.product(Status, Status) if p not in LEGAL])
def test_every_other_transition_is_refused(current: Status, new: Status) -> None:
    with pytest.raises(IllegalTransition):
        check_transition(current, new)


def test_terminal_statuses_have_no_way_out() -> None:
    assert {Status.succeeded, Status.failed, Status.canceled} == TERMINAL
    for status in TERMINAL:
        for new in Status:
            with pytest.raises(IllegalTransition):
                check_transition(status, new)


def test_valid_request_parses() -> None:
    req = parse_create_request(body())
    assert req.model == "tiny-wan"
    assert req.parameters.duration_seconds == 2
    assert req.parameters.seed is None


@pytest.mark.parametrize(
    ("mutate", "param"),
    [
        (lambda b: b["parameters"].update(duration_seconds="5"), "parameters.duration_seconds"),
        (lambda b: b["parameters"].update(duration_seconds=2.0), "parameters.duration_seconds"),
        (lambda b: b["parameters"].update(audio="yes"), "parameters.audio"),
        (lambda b: b["parameters"].update(audio=1), "parameters.audio"),
        (lambda b: b["parameters"].update(resolution="high"), "parameters.resolution"),
        (lambda b: b["parameters"].update(ratio="16x9"), "parameters.ratio"),
        (lambda b: b["parameters"].update(duration_seconds=0), "parameters.duration_seconds"),
        (lambda b: b["parameters"].update(duration_seconds=-3), "parameters.duration_seconds"),
        (lambda b: b["parameters"].update(seed=-1), "parameters.seed"),
        (lambda b: b["parameters"].update(fps=30), "parameters.fps"),
        (lambda b: b["input"].update(prompt=""), "input.prompt"),
        (lambda b: b["input"].update(prompt="   \n"), "input.prompt"),
        (lambda b: b["input"].update(prompt=42), "input.prompt"),
        (lambda b: b.update(extra_field=True), "extra_field"),
        (lambda b: b.pop("model"), "model"),
        (lambda b: b.pop("input"), "input"),
    ],
)
def test_strict_request_rejects_with_code_and_path(mutate: Any, param: str) -> None:
    data = body()
    mutate(data)
    with pytest.raises(RequestRejected) as info:
        parse_create_request(data)
    assert info.value.code is ErrorCode.invalid_parameter
    assert info.value.param == param


@pytest.mark.parametrize("data", [None, [], "text", 3])
def test_non_object_body_is_invalid_request(data: object) -> None:
    with pytest.raises(RequestRejected) as info:
        parse_create_request(data)
    assert info.value.code is ErrorCode.invalid_request


def _record_json() -> dict[str, Any]:
    req = parse_create_request(body())
    record = GenerationRecord(
        id="gen_1",
        model=req.model,
        mode=req.mode,
        variant=req.variant,
        parameters=req.parameters.model_dump(),
        input=req.input.model_dump(),
        price_hold=Money(amount="0.02"),
    )
    return record.model_dump(mode="json")


def test_record_tolerates_unknown_fields_on_read() -> None:
    data = _record_json()
    data["future_field"] = {"x": 1}
    data["parameters"]["future_parameter"] = "later"
    data["artifacts"] = [
        {
            "kind": "video",
            "key": "generations/gen_1/1/video.mp4",
            "content_type": "video/mp4",
            "bytes": 10,
            "sha256": "0" * 64,
            "width": 256,
            "height": 144,
            "new_metadata": True,
        }
    ]
    record = GenerationRecord.model_validate(data)
    assert record.id == "gen_1"
    assert record.artifacts[0].width == 256
    assert not record.terminal


def test_record_round_trips_through_json() -> None:
    data = _record_json()
    record = GenerationRecord.model_validate(data)
    again = GenerationRecord.model_validate_json(record.model_dump_json())
    assert again == record


def test_error_codes_are_a_closed_string_enum() -> None:
    assert ErrorCode("model_not_found") is ErrorCode.model_not_found
    with pytest.raises(ValueError):
        ErrorCode("no_such_code")
