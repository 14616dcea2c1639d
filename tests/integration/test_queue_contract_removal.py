"""The queue contract's delete and oldest-first listing (what the Videos API's ``DELETE /v1/videos/{id}`` and
``GET /v1/videos?order=asc&after=<id>`` stand on), run against both backends like the rest of the suite."""

from __future__ import annotations

import pytest

from foundation.core.contract import Status
from foundation.core.errors import UnknownJob
from foundation.queue.base import JobQueue, Outcome, list_cursor
from tests.integration import queue_support
from tests.integration.queue_support import new_record

# The per-backend fixtures (redis, sqlite): every test here runs against both.
make_queue = queue_support.make_queue
queue = queue_support.queue


def _finished(queue: JobQueue, **record: str) -> str:
    """A job enqueued with the key ``k1``, claimed and ended ``failed`` (terminal, no objects to speak of)."""
    job = queue.enqueue(new_record(**record), idempotency_key="k1", request_hash="h1").record
    claim = queue.claim("w1", [job.model])
    assert claim is not None and claim.job_id == job.id
    assert queue.finish(claim, Outcome(status=Status.failed))
    return job.id


def test_delete_removes_a_terminal_job_and_frees_its_key(queue: JobQueue) -> None:
    job_id = _finished(queue)
    assert queue.get(job_id).idempotency_key == "k1"  # type: ignore[union-attr]
    kept = queue.enqueue(new_record()).record.id
    deleted = queue.delete(job_id)
    assert deleted.id == job_id and deleted.status is Status.failed
    assert queue.get(job_id) is None
    assert [r.id for r in queue.list_jobs("proj-a")[0]] == [kept]
    assert queue.events(job_id) == [] and queue.progress_notes(job_id) == []
    with pytest.raises(UnknownJob):
        queue.cancel(job_id)
    with pytest.raises(UnknownJob):
        queue.delete(job_id)
    # The key named the deleted job: a create repeated with it makes a new one, not the deleted one again.
    again = queue.enqueue(new_record(), idempotency_key="k1", request_hash="h1")
    assert not again.replayed and again.record.id != job_id
    assert queue.enqueue(new_record(), idempotency_key="k1", request_hash="h1").record.id == again.record.id


def test_delete_leaves_a_job_that_has_not_ended(queue: JobQueue) -> None:
    queued = queue.enqueue(new_record()).record
    assert queue.delete(queued.id).status is Status.queued
    claim = queue.claim("w1", ["tiny-wan"])
    assert claim is not None
    assert queue.delete(queued.id).status is Status.running
    assert queue.get(queued.id) is not None and queue.renew(claim)
    with pytest.raises(UnknownJob):
        queue.delete("gen_missing")


def test_list_jobs_pages_oldest_first_and_resumes_after_any_record(queue: JobQueue) -> None:
    mine = [queue.enqueue(new_record()).record for _ in range(5)]
    queue.enqueue(new_record(project="proj-b"))
    oldest_first = [r.id for r in sorted(mine, key=lambda r: (r.created_at, r.id))]
    seen: list[str] = []
    cursor: str | None = None
    while True:
        page, cursor = queue.list_jobs("proj-a", limit=2, cursor=cursor, oldest_first=True)
        seen += [r.id for r in page]
        if cursor is None:
            break
    assert seen == oldest_first
    # A cursor built from a record resumes right after it, in either order.
    third = next(r for r in mine if r.id == oldest_first[2])
    after, _ = queue.list_jobs("proj-a", cursor=list_cursor(third), oldest_first=True)
    assert [r.id for r in after] == oldest_first[3:]
    before, _ = queue.list_jobs("proj-a", cursor=list_cursor(third))
    assert [r.id for r in before] == oldest_first[:2][::-1]
