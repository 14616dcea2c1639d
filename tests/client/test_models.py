"""Parsing what the service sends: unknown fields tolerated, error bodies mapped onto ``ApiError``."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest

from genworker_client import wire
from genworker_client.errors import ApiError
from genworker_client.models import Generation, GenerationPage, Model


def record(**overrides: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "id": "gen_123",
        "object": "generation",
        "status": "succeeded",
        "stage": "done",
        "progress": 1.0,
        "model": "tiny-wan",
        "mode": "text_to_video",
        "variant": "standard",
        "parameters": {"resolution": "144p", "duration_seconds": 2},
        "input": {"prompt": "a lighthouse"},
        "price_hold": {"currency": "USD", "amount": "0.020000"},
        "artifacts": [
            {
                "kind": "video",
                "download_url": "http://127.0.0.1:1/files/x.mp4?sig=abc",
                "expires_at": "2030-01-01T00:00:00Z",
                "content_type": "video/mp4",
                "bytes": 1234,
                "sha256": "ab" * 32,
            }
        ],
        "created_at": "2026-01-01T00:00:00Z",
    }
    data.update(overrides)
    return data


def response(status: int, body: Any, headers: dict[str, str] | None = None) -> httpx.Response:
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    return httpx.Response(status, content=content, headers=headers, request=httpx.Request("GET", "http://t/v1/x"))


def test_unknown_fields_everywhere_are_ignored() -> None:
    data = record(
        future_field={"nested": [1, 2]},
        price_hold={"currency": "USD", "amount": "0.020000", "breakdown": [{"x": 1}]},
        error=None,
        usage={"output_seconds": 2.0, "gpu_seconds": 0.4, "energy_wh": 0.1},
    )
    data["artifacts"][0]["codec"] = "h264"
    data["artifacts"][0]["watermark"] = {"kind": "c2pa"}
    generation = Generation.model_validate(data)
    assert generation.id == "gen_123"
    assert generation.artifacts[0].bytes == 1234
    assert generation.artifacts[0].expires_at == datetime(2030, 1, 1, tzinfo=UTC)
    assert str(generation.price_hold.value if generation.price_hold else None) == "0.020000"
    assert not hasattr(generation, "future_field")


def test_a_status_this_client_does_not_know_counts_as_not_terminal() -> None:
    generation = Generation.model_validate(record(status="paused_for_review", artifacts=[]))
    assert generation.status == "paused_for_review"
    assert not generation.terminal
    for status in ("succeeded", "failed", "canceled"):
        assert Generation.model_validate(record(status=status)).terminal


def test_only_the_id_is_required() -> None:
    generation = Generation.model_validate({"id": "gen_9"})
    assert (generation.status, generation.artifacts, generation.price_hold) == ("queued", [], None)
    with pytest.raises(ValueError, match="id"):
        Generation.model_validate({"status": "queued"})


def test_response_metadata_rides_on_the_record() -> None:
    r = response(202, record(status="queued", artifacts=[]), {"Retry-After": "5", "Idempotent-Replayed": "true"})
    generation = wire.generation_from_response(r, idempotency_key="k-1")
    assert (generation.retry_after_s, generation.idempotency_key, generation.replayed) == (5.0, "k-1", True)
    plain = wire.generation_from_response(response(200, record()))
    assert (plain.retry_after_s, plain.idempotency_key, plain.replayed) == (None, None, False)


def test_page_and_models_tolerate_extra_fields() -> None:
    page = wire.page_from_response(
        response(200, {"object": "list", "data": [record(), record(id="gen_2")], "next_cursor": "c2", "has_more": True})
    )
    assert [g.id for g in page.data] == ["gen_123", "gen_2"]
    assert page.next_cursor == "c2"
    assert GenerationPage.model_validate({"data": []}).next_cursor is None
    assert page.skipped == 0  # a server that does not say
    skipped = wire.page_from_response(response(200, {"object": "list", "data": [], "next_cursor": None, "skipped": 2}))
    assert skipped.skipped == 2
    models = wire.models_from_response(response(200, {"data": [{"id": "tiny-wan", "available": True, "fps": 4}]}))
    assert models == [Model(id="tiny-wan", available=True, fps=4)]
    assert wire.models_from_response(response(200, [{"id": "m"}]))[0].id == "m"


def test_error_body_maps_onto_api_error() -> None:
    body = {"error": {"code": "invalid_parameter", "message": "bad resolution", "param": "parameters.resolution"}}
    error = wire.error_from_response(response(400, body))
    assert (error.status, error.code, error.message, error.param) == (
        400,
        "invalid_parameter",
        "bad resolution",
        "parameters.resolution",
    )
    assert error.retry_after_s is None
    limited = wire.error_from_response(
        response(
            429,
            {"error": {"code": "rate_limited", "message": "slow down", "param": None, "extra": 1}},
            {"Retry-After": "3"},
        )
    )
    assert (limited.code, limited.param, limited.retry_after_s) == ("rate_limited", None, 3.0)


def test_error_without_the_service_shape_still_has_status_and_code() -> None:
    error = wire.error_from_response(response(403, b"<Error><Code>AccessDenied</Code></Error>"))
    assert (error.status, error.code) == (403, "http_403")
    assert "AccessDenied" in error.message


def test_a_body_that_is_not_a_record_is_an_api_error() -> None:
    with pytest.raises(ApiError) as caught:
        wire.generation_from_response(response(200, {"status": "queued"}))
    assert caught.value.code == "invalid_response"
    with pytest.raises(ApiError, match="not JSON"):
        wire.generation_from_response(response(200, b"<html>"))


def test_create_body_omits_unset_parameters() -> None:
    body = wire.create_body("tiny-wan", "a cat", mode="text_to_video", variant="standard", resolution="144p", seed=0)
    assert body == {
        "model": "tiny-wan",
        "mode": "text_to_video",
        "variant": "standard",
        "parameters": {"resolution": "144p", "seed": 0},
        "input": {"prompt": "a cat"},
    }


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("http://h:8000", "http://h:8000/v1"),
        ("http://h:8000/", "http://h:8000/v1"),
        ("http://h:8000/v1", "http://h:8000/v1"),
        ("http://h:8000/v1/", "http://h:8000/v1"),
        ("https://api.example.test/gen/v1", "https://api.example.test/gen/v1"),
    ],
)
def test_base_url_gets_the_version_segment_when_it_has_no_path(given: str, expected: str) -> None:
    assert wire.normalize_base_url(given) == expected


def test_create_body_carries_the_generations_own_webhook_when_given() -> None:
    body = wire.create_body(
        "tiny-wan",
        "a cat",
        mode="text_to_video",
        variant="standard",
        webhook_url="https://example.com/h",
        webhook_events=["generation.succeeded"],
    )
    assert (body["webhook_url"], body["webhook_events"]) == ("https://example.com/h", ["generation.succeeded"])
    assert "webhook_url" not in wire.create_body("tiny-wan", "a cat", mode="text_to_video", variant="standard")
