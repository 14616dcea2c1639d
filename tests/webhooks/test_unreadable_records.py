"""The sender's fan-out meets records this version cannot read (issue 50), on a real SQLite queue and a
real redis-server: a newer version's record (a rolling upgrade) is left to that version's sender, and a
record no version reads is passed without deliveries; the other jobs' events are fanned out and delivered
all the same, and each unreadable job is logged once. Before, the round failed on it and was retried for
ever: no event after it was fanned out, and no delivery was sent by that sender."""

from __future__ import annotations

import json
import logging
import sqlite3
from collections.abc import Iterator
from contextlib import closing
from datetime import datetime, timedelta
from pathlib import Path

import pytest
import redis

from api.webhooks.models import DeliveryState
from api.webhooks.sender import NEWER_HOLD_S, Sender
from api.webhooks.service import Webhooks, open_webhooks
from foundation.core.catalog import Catalog
from foundation.core.contract import GenerationRecord, Status, utcnow
from foundation.queue import keys
from foundation.queue.base import JobQueue
from foundation.queue.factory import open_queue
from foundation.queue.records import RECORD_FORMAT
from foundation.settings import Settings
from tests.integration.worker_harness import wait_until
from tests.webhooks.conftest import Receiver, hook_settings, run_job

GARBAGE = '{"id": "cut short by a faulty write'  # no JSON object: nothing of it validates


class Clock:
    """The sender's clock, moved by the test (how long it has held the cursor for a newer version)."""

    def __init__(self) -> None:
        self.ahead = timedelta(0)

    def __call__(self) -> datetime:
        return utcnow() + self.ahead


@pytest.fixture(params=["sqlite", "redis"])
def settings(request: pytest.FixtureRequest, tmp_path: Path) -> Settings:
    redis_url = request.getfixturevalue("redis_url") if request.param == "redis" else None
    return hook_settings(tmp_path, redis_url=redis_url)


@pytest.fixture
def queue(settings: Settings) -> Iterator[JobQueue]:
    with closing(open_queue(settings.queue)) as q:
        yield q


@pytest.fixture
def hooks(settings: Settings) -> Iterator[Webhooks]:
    with closing(open_webhooks(settings)) as service:
        yield service


def _write(settings: Settings, record: GenerationRecord, text: str, record_format: int) -> None:
    """Store ``text`` as the record, in ``record_format``, as another version or a faulty write leaves it."""
    if settings.queue.backend == "redis":
        with closing(redis.Redis.from_url(settings.queue.redis_url)) as client:
            client.hset(keys.job_record(record.model, record.id), mapping={"record": text, "format": record_format})
        return
    with closing(sqlite3.connect(settings.queue.sqlite_path)) as conn, conn:
        conn.execute("UPDATE jobs SET record = ?, record_format = ? WHERE id = ?", (text, record_format, record.id))


def _stored(queue: JobQueue, record: GenerationRecord) -> tuple[str, int]:
    """The record's own text and format, to put back once "a newer version" has rewritten it."""
    stored = queue.get(record.id)
    assert stored is not None
    return stored.model_dump_json(), RECORD_FORMAT


def _delivered(hooks: Webhooks, endpoint_id: str) -> set[tuple[str, str]]:
    found = hooks.store.list_deliveries(endpoint_id, 100)
    return {(d.generation_id, d.event_type.value) for d in found if d.state is DeliveryState.delivered}


def _both(record: GenerationRecord) -> set[tuple[str, str]]:
    return {(record.id, "generation.running"), (record.id, "generation.succeeded")}


def test_unreadable_records_are_skipped_by_this_sender_without_losing_the_others(
    settings: Settings,
    queue: JobQueue,
    hooks: Webhooks,
    receiver: Receiver,
    catalog: Catalog,
    caplog: pytest.LogCaptureFixture,
) -> None:
    endpoint, _ = hooks.add_endpoint("alpha", receiver.url)
    first, newer, broken, last = (run_job(queue, catalog, "alpha") for _ in range(4))
    own_text, own_format = _stored(queue, newer)
    _write(settings, newer, json.dumps({**json.loads(own_text), "stage": "reviewing"}), RECORD_FORMAT + 1)
    _write(settings, broken, GARBAGE, record_format=RECORD_FORMAT)
    clock = Clock()
    sender = Sender(queue, hooks.store, hooks.sealer, hooks.transport, settings.webhooks, clock=clock)
    try:
        caplog.set_level(logging.WARNING, logger="genworker.webhooks")

        def sent(expected: set[tuple[str, str]]) -> bool:
            sender.run_once()
            return _delivered(hooks, endpoint.id) == expected

        # The jobs before and after the unreadable ones are delivered by this sender; the cursor waits
        # before the newer record's first event, for a newer version's sender.
        wait_until(lambda: sent(_both(first) | _both(last)), "the readable jobs' deliveries", timeout_s=20)
        left = queue.events(after=hooks.store.cursor(), limit=100)
        assert first.id not in {e.job_id for e in left}
        assert [(e.job_id, e.status) for e in left if e.status is not Status.queued][:2] == [
            (newer.id, Status.running),
            (newer.id, Status.succeeded),
        ]
        assert sender.fan_out() == 0  # held, not spinning: nothing new passed
        noted = [r.getMessage() for r in caplog.records if r.__dict__.get("job_id") in (newer.id, broken.id)]
        assert sorted(noted) == [
            "webhook events left to a newer version's sender",
            "webhook events passed: no version reads the record",
        ]  # once per job, however often the held read is repeated

        # What a newer version's sender reads, this test's sender reads once the record is its own format
        # again: the events left are fanned out then, never lost; the broken job's never are.
        _write(settings, newer, own_text, own_format)
        wait_until(lambda: sent(_both(first) | _both(newer) | _both(last)), "the newer job's deliveries", 20)
        assert hooks.store.cursor() == queue.events(after=None, limit=100)[-1].id
    finally:
        sender.close()


def test_a_newer_record_no_newer_sender_takes_is_passed_in_time(
    settings: Settings, queue: JobQueue, hooks: Webhooks, receiver: Receiver, catalog: Catalog
) -> None:
    """A rollback leaves no newer sender: past ``NEWER_HOLD_S`` the cursor passes the newer record's events."""
    endpoint, _ = hooks.add_endpoint("alpha", receiver.url)
    newer, after = run_job(queue, catalog, "alpha"), run_job(queue, catalog, "alpha")
    _write(settings, newer, newer.model_dump_json(), record_format=RECORD_FORMAT + 1)
    clock = Clock()
    sender = Sender(queue, hooks.store, hooks.sealer, hooks.transport, settings.webhooks, clock=clock)
    try:
        sender.fan_out()
        left = queue.events(after=hooks.store.cursor(), limit=100)  # held before its first webhook's event
        assert (left[0].job_id, left[0].status) == (newer.id, Status.running)
        assert sender.fan_out() == 0
        clock.ahead = timedelta(seconds=NEWER_HOLD_S + 1)
        assert sender.fan_out() == len(left)
        assert hooks.store.cursor() == left[-1].id
        assert {d.generation_id for d in hooks.store.list_deliveries(endpoint.id, 100)} == {after.id}
    finally:
        sender.close()
