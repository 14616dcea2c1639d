"""A claimed record re-checked as a strict request, and the final price never above the hold."""

from __future__ import annotations

from decimal import Decimal

import pytest

from foundation.core.catalog import load_catalog
from foundation.core.contract import GenerationRecord
from foundation.core.errors import ErrorCode, RequestRejected
from foundation.core.resolve import resolve
from foundation.queue.base import Claim
from tests.integration.worker_harness import make_record
from worker.resolutions import rebuild_request

CATALOG = load_catalog()


def claim_of(record: GenerationRecord) -> Claim:
    return Claim(job_id=record.id, model=record.model, attempt=1, record=record)


def test_a_record_without_a_seed_gets_the_same_seed_on_every_attempt() -> None:
    record = make_record(CATALOG, "tiny-wan")
    record = record.model_copy(update={"parameters": record.parameters.model_copy(update={"seed": None})})
    first = rebuild_request(claim_of(record)).parameters.seed
    again = rebuild_request(claim_of(record)).parameters.seed
    other = make_record(CATALOG, "tiny-wan")
    other = other.model_copy(update={"parameters": other.parameters.model_copy(update={"seed": None})})
    assert first is not None and first == again
    assert rebuild_request(claim_of(other)).parameters.seed != first


def test_an_explicit_seed_and_the_parameters_survive_the_round_trip() -> None:
    record = make_record(CATALOG, "tiny-ltx2", resolution="240p", ratio="9:16", duration_seconds=3, audio=True)
    request = rebuild_request(claim_of(record))
    job, hold = resolve(request, CATALOG)
    assert (job.seed, job.width, job.height, job.duration_seconds, job.audio) == (7, 240, 432, 3, True)
    assert hold == record.price_hold


def test_a_record_the_catalog_refuses_is_rejected_with_its_code() -> None:
    record = make_record(CATALOG, "tiny-wan")
    record = record.model_copy(update={"parameters": record.parameters.model_copy(update={"audio": True})})
    with pytest.raises(RequestRejected) as info:
        resolve(rebuild_request(claim_of(record)), CATALOG)
    assert info.value.code is ErrorCode.unsupported_parameter


def test_final_price_is_capped_at_the_hold() -> None:
    from worker.postprocess import final_price

    record = make_record(CATALOG, "tiny-wan", duration_seconds=2)
    job, hold = resolve(rebuild_request(claim_of(record)), CATALOG)
    assert hold.amount == "0.02"  # 2 s at 0.01 USD/s
    assert final_price(CATALOG, job, hold, Decimal(2)).amount == "0.02"
    assert final_price(CATALOG, job, hold, Decimal(1)).amount == "0.01"  # fewer seconds delivered, less
    lower = hold.model_copy(update={"amount": "0.01"})
    assert final_price(CATALOG, job, lower, Decimal(2)).amount == "0.01"  # never above the hold
