"""Crash tests with real processes: a consumer that holds a job is killed with SIGKILL; the job is
re-delivered once its lease lapses and finishes exactly once, on attempt 2 (both backends)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from foundation.core.contract import Status
from foundation.queue.base import JobQueue, Outcome
from tests.integration import queue_support
from tests.integration.queue_support import new_record

make_queue = queue_support.make_queue  # per-backend fixture: redis and sqlite

LEASE_S = 1.0
ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_killed_consumer_job_is_redelivered_and_finishes_once(make_queue: Callable[..., JobQueue]) -> None:
    q = make_queue(lease_ttl_s=LEASE_S)
    record = q.enqueue(new_record()).record
    backend, location = make_queue.backend, make_queue.location  # type: ignore[attr-defined]
    consumer = subprocess.Popen(
        [sys.executable, "-m", "tests.integration.queue_consumer", backend, location, str(LEASE_S), "doomed"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert consumer.stdout is not None
        reported = json.loads(consumer.stdout.readline())
        assert reported == {"job_id": record.id, "attempt": 1}
        # While the consumer lives, its renewals keep the job from anyone else for several leases.
        held_until = time.monotonic() + 3 * LEASE_S
        while time.monotonic() < held_until:
            assert q.claim("survivor", ["tiny-wan"], block_s=0.2) is None
        os.kill(consumer.pid, signal.SIGKILL)
        consumer.wait(timeout=10)
    finally:
        if consumer.poll() is None:
            os.kill(consumer.pid, signal.SIGKILL)
            consumer.wait(timeout=10)
        if consumer.stdout is not None:
            consumer.stdout.close()
    claim = q.claim("survivor", ["tiny-wan"], block_s=10 * LEASE_S)
    assert claim is not None and claim.job_id == record.id and claim.attempt == 2
    assert q.finish(claim, Outcome(status=Status.succeeded))
    assert q.claim("survivor", ["tiny-wan"], block_s=0.5) is None  # nothing left, nothing twice
    done = q.get(record.id)
    assert done is not None and done.status is Status.succeeded and done.attempt == 2
    statuses = [e.status for e in q.events(record.id)]
    assert statuses == [Status.queued, Status.running, Status.queued, Status.running, Status.succeeded]
    assert [r.id for r in q.list_jobs("proj-a")[0]] == [record.id]
