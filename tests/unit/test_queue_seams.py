"""The queue's seams without a server: backend errors translated to ``BackendUnavailable``, the
out-of-attempts rule, and the Redis plans (one frozen value per transition)."""

from __future__ import annotations

import dataclasses
import socket
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import redis.exceptions as rx

from foundation.core.contract import ErrorInfo, Stage, Status
from foundation.core.errors import BackendUnavailable, ErrorCode
from foundation.queue import records
from foundation.queue.base import Claim, Outcome, WorkerHeartbeat
from foundation.queue.config import QueueSettings
from foundation.queue.factory import open_queue
from foundation.queue.policy import DeadReason, EventReason, out_of_attempts
from foundation.queue.redis import plans as redis_plans
from foundation.queue.redis.plans import Snapshot
from foundation.queue.unavailable import redis_unavailable, sqlite_unavailable
from tests.integration.queue_support import new_record

DOWN: list[BaseException] = [
    rx.ConnectionError("Error 111 connecting"),
    rx.AuthenticationError("invalid password"),
    rx.BusyLoadingError("LOADING Redis is loading the dataset in memory"),
    rx.TimeoutError("Timeout reading from socket"),
    rx.ReadOnlyError("You can't write against a read only replica."),
    rx.OutOfMemoryError("command not allowed when used memory > 'maxmemory'."),
    rx.ClusterDownError("CLUSTERDOWN The cluster is down"),
    rx.TryAgainError("TRYAGAIN"),
    rx.ResponseError("OOM command not allowed when used memory > 'maxmemory'. script: abc"),
    rx.ResponseError("BUSY Redis is busy running a script."),
    rx.RedisClusterException("Redis Cluster cannot be connected. Please provide at least one reachable node"),
    ConnectionResetError("reset by peer"),
]
NOT_DOWN: list[BaseException] = [
    rx.ResponseError("WRONGTYPE Operation against a key holding the wrong kind of value"),
    rx.ResponseError("BUSYGROUP Consumer Group name already exists"),
    rx.NoScriptError("NOSCRIPT No matching script"),
    rx.DataError("Invalid input of type: 'NoneType'"),
    ValueError("not a database number"),
]


@pytest.mark.parametrize("error", DOWN, ids=lambda e: type(e).__name__)
def test_redis_errors_meaning_unreachable_become_backend_unavailable(error: BaseException) -> None:
    with pytest.raises(BackendUnavailable) as info, redis_unavailable:
        raise error
    assert info.value.__cause__ is error and info.value.code is ErrorCode.service_unavailable


@pytest.mark.parametrize("error", NOT_DOWN, ids=lambda e: type(e).__name__)
def test_other_redis_errors_pass_through_unchanged(error: BaseException) -> None:
    with pytest.raises(type(error)) as info, redis_unavailable:
        raise error
    assert info.value is error


def test_sqlite_operational_errors_are_unavailable_and_integrity_errors_are_not() -> None:
    locked = sqlite3.OperationalError("database is locked")
    with pytest.raises(BackendUnavailable) as info, sqlite_unavailable:
        raise locked
    assert info.value.__cause__ is locked
    with pytest.raises(sqlite3.IntegrityError), sqlite_unavailable:
        raise sqlite3.IntegrityError("UNIQUE constraint failed")


def test_the_helpers_also_decorate() -> None:
    @redis_unavailable
    def call(x: int) -> int:
        if x < 0:
            raise rx.ConnectionError("down")
        return x + 1

    assert call(1) == 2
    with pytest.raises(BackendUnavailable):
        call(-1)


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_an_unreachable_cluster_fails_at_open_as_unavailable() -> None:
    settings = QueueSettings(backend="redis", redis_mode="cluster", redis_url=f"redis://127.0.0.1:{_closed_port()}/0")
    with pytest.raises(BackendUnavailable) as info:
        open_queue(settings)
    assert isinstance(info.value.__cause__, rx.RedisClusterException)


def test_an_unopenable_sqlite_file_fails_at_open_as_unavailable(tmp_path: Path) -> None:
    with pytest.raises(BackendUnavailable) as info:
        open_queue(QueueSettings(backend="sqlite", sqlite_path=str(tmp_path)))  # a directory
    assert isinstance(info.value.__cause__, sqlite3.OperationalError)


def test_every_queue_call_on_an_unreachable_redis_raises_backend_unavailable() -> None:
    queue = open_queue(QueueSettings(backend="redis", redis_url=f"redis://127.0.0.1:{_closed_port()}/0"))
    record = new_record()
    claim = Claim(record.id, record.model, 1, record, token="1-0|w1")
    error = ErrorInfo(code=ErrorCode.upload_failed, message="x")
    calls: list[Callable[[], Any]] = [
        lambda: queue.enqueue(record),
        lambda: queue.enqueue(record, idempotency_key="k", request_hash="h"),
        lambda: queue.get(record.id),
        lambda: queue.list_jobs("proj-a"),
        lambda: queue.cancel(record.id),
        lambda: queue.depth("tiny-wan"),
        lambda: queue.position(record.id),
        queue.live_workers,
        queue.events,
        lambda: queue.events(record.id),
        lambda: queue.claim("w1", ["tiny-wan"]),
        lambda: queue.renew(claim),
        lambda: queue.progress(claim, Stage.denoising, 0.5),
        lambda: queue.cancel_requested(record.id),
        lambda: queue.finish(claim, Outcome(status=Status.succeeded)),
        lambda: queue.retry(claim, error, delay_s=0),
        lambda: queue.release(claim),
        queue.reclaim_expired,
        lambda: queue.heartbeat(WorkerHeartbeat(worker_id="w1", hosted_models=["tiny-wan"]), ttl_s=5),
        queue.dead_letters,
    ]
    try:
        for call in calls:
            with pytest.raises(BackendUnavailable):
                call()
    finally:
        queue.close()


# ------------------------------------------------------------------------------------------ policy
@pytest.mark.parametrize(
    ("attempt", "released", "max_attempts", "out"),
    [(1, 0, 3, False), (2, 0, 3, False), (3, 0, 3, True), (3, 1, 3, False), (4, 1, 3, True), (1, 0, 1, True)],
)
def test_out_of_attempts_counts_releases_as_unused(attempt: int, released: int, max_attempts: int, out: bool) -> None:
    record = new_record().model_copy(update={"attempt": attempt, "max_attempts": max_attempts})
    assert out_of_attempts(record, released) is out


# ------------------------------------------------------------------------------------------ plans
def _running(attempt: int = 1, **update: Any) -> tuple[Snapshot, Claim]:
    record = records.started(records.enqueued(new_record(), max_attempts=3))
    record = record.model_copy(update={"attempt": attempt, **update})
    snap = Snapshot(record, rev=7, entry="5-0", released=0)
    return snap, Claim(record.id, record.model, attempt, record, token="5-0|w1")


def test_plans_are_frozen() -> None:
    snap, claim = _running()
    plan = redis_plans.release(snap, claim)
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.event = "patched"  # type: ignore[misc]


def test_retry_parks_a_delayed_job_or_re_enters_the_stream_at_once() -> None:
    snap, claim = _running()
    error = ErrorInfo(code=ErrorCode.upload_failed, message="store down")
    later = redis_plans.retry(snap, claim, error, delay_s=5)
    assert later.delay_ms == 5000 and later.payload is None and later.ack == "5-0"
    now = redis_plans.retry(snap, claim, error, delay_s=0)
    assert now.delay_ms is None and now.payload is not None
    assert now.event == "retry: upload_failed" and now.status is Status.queued
    assert (now.fence_attempt, now.fence_entry, now.rev) == (1, "5-0", 7)
    assert now.record is not None and now.record.error == error


def test_release_does_not_use_up_an_attempt() -> None:
    snap, claim = _running()
    plan = redis_plans.release(snap, claim)
    assert plan.released_incr == 1 and plan.event == EventReason.released == "released"
    assert plan.payload is not None and plan.status is Status.queued


def test_reclaim_picks_one_plan_per_case() -> None:
    snap, _ = _running(attempt=1)
    assert redis_plans.reclaim(snap, "9-9") is None  # not the job's entry any more
    requeued = redis_plans.reclaim(snap, "5-0")
    assert requeued is not None and requeued.event == "lease_expired" and requeued.owned_by == "_reaper"
    last, _ = _running(attempt=3)
    dead = redis_plans.reclaim(last, "5-0")
    assert dead is not None and dead.status is Status.failed and dead.payload is None
    assert dead.dead == DeadReason.worker_lost and dead.event == "failed: worker_lost (worker_lost)"
    canceling, _ = _running(attempt=3, cancel_requested=True)
    canceled = redis_plans.reclaim(canceling, "5-0")
    assert canceled is not None and canceled.status is Status.canceled and canceled.event == "canceled: lease lapsed"
