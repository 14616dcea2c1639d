"""Create-call logic: Idempotency-Key format, the request fingerprint, the queued record, Retry-After."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from api.create import build_record, check_idempotency_key, parse_body, request_hash
from api.errors import ApiError
from api.views import retry_after_s
from foundation.core.catalog import load_catalog
from foundation.core.contract import Status, parse_create_request, utcnow
from foundation.core.errors import ErrorCode, RequestRejected
from foundation.settings import ApiSettings

CATALOG = load_catalog()


def body(**parameters: Any) -> dict[str, Any]:
    return {
        "model": "tiny-wan",
        "mode": "text_to_video",
        "variant": "standard",
        "parameters": parameters,
        "input": {"prompt": "a red fox in snow"},
    }


@pytest.mark.parametrize("key", ["a", "x" * 255, "order-42 retry", "~!@#$%^&*()_+{}|:<>?"])
def test_idempotency_key_accepts_printable_ascii(key: str) -> None:
    assert check_idempotency_key(key) == key


@pytest.mark.parametrize("key", ["", "x" * 256, "tab\there", "caf\u00e9", "nul\x00", "del\x7f"])
def test_idempotency_key_rejects_bad_format(key: str) -> None:
    with pytest.raises(ApiError) as e:
        check_idempotency_key(key)
    assert (e.value.status, e.value.code, e.value.param) == (400, ErrorCode.invalid_request, "Idempotency-Key")


def test_absent_idempotency_key_is_fine() -> None:
    assert check_idempotency_key(None) is None


@pytest.mark.parametrize("raw", [b"", b"{", b"\xff\xfe", b"[" * 100_000, b'{"model": NaN'])
def test_malformed_json_is_invalid_request(raw: bytes) -> None:
    with pytest.raises(ApiError) as e:
        parse_body(raw, load_catalog())
    assert (e.value.status, e.value.code) == (400, ErrorCode.invalid_request)


def test_non_object_json_is_invalid_request() -> None:
    with pytest.raises(RequestRejected) as e:
        parse_body(b"[1, 2]", load_catalog())
    assert e.value.code is ErrorCode.invalid_request


def test_request_hash_ignores_key_order_and_explicit_nulls() -> None:
    a = parse_create_request(body(resolution="144p", seed=None))
    b = parse_create_request({**body(), "parameters": {"resolution": "144p"}})
    reordered = parse_create_request(dict(reversed(list(body(resolution="144p").items()))))
    assert request_hash(a) == request_hash(b) == request_hash(reordered)


def test_request_hash_changes_with_any_field() -> None:
    base = request_hash(parse_create_request(body(resolution="144p")))
    assert request_hash(parse_create_request(body(resolution="240p"))) != base
    changed_prompt = body(resolution="144p")
    changed_prompt["input"]["prompt"] = "a blue fox"
    assert request_hash(parse_create_request(changed_prompt)) != base


def test_record_stores_resolved_parameters_and_a_seed() -> None:
    record = build_record(parse_create_request(body()), CATALOG, project="p1", max_attempts=4)
    spec = CATALOG.models["tiny-wan"]
    assert record.id.startswith("gen_") and len(record.id) == 36
    assert (record.project, record.status, record.max_attempts) == ("p1", Status.queued, 4)
    p = record.parameters
    assert (p.resolution, p.ratio, p.duration_seconds) == (
        spec.defaults["resolution"],
        spec.defaults["ratio"],
        spec.defaults["duration_seconds"],
    )
    assert p.seed is not None
    # 2 s at 144p, 0.01 USD/s.
    assert record.price_hold.amount == "0.02"


def test_explicit_seed_is_kept_and_ids_are_unique() -> None:
    a = build_record(parse_create_request(body(seed=7)), CATALOG, project="p", max_attempts=3)
    b = build_record(parse_create_request(body(seed=7)), CATALOG, project="p", max_attempts=3)
    assert a.parameters.seed == b.parameters.seed == 7
    assert a.id != b.id


def test_catalog_refusal_is_coded() -> None:
    with pytest.raises(RequestRejected) as e:
        build_record(parse_create_request(body(audio=True)), CATALOG, project="p", max_attempts=3)
    assert (e.value.code, e.value.param) == (ErrorCode.unsupported_parameter, "parameters.audio")


def test_retry_after_follows_the_polling_cadence() -> None:
    api = ApiSettings(poll_first_s=5, poll_first_window_s=30, poll_min_s=10, poll_max_s=15)
    record = build_record(parse_create_request(body()), CATALOG, project="p", max_attempts=3)
    assert retry_after_s(record, api, record.created_at + timedelta(seconds=1)) == 5
    later = {retry_after_s(record, api, record.created_at + timedelta(seconds=31)) for _ in range(200)}
    assert later <= set(range(10, 16)) and len(later) > 1  # jittered within 10-15 s
    done = record.model_copy(update={"status": Status.succeeded})
    assert retry_after_s(done, api, utcnow()) is None
