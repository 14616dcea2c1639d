"""The queue contract under the faults a fleet meets, against both backends (a real redis-server and a
SQLite file): records this version cannot read, mixed lease settings, records left with no lease."""

from __future__ import annotations

import json
import time
from collections.abc import Callable

from foundation.core.contract import Status
from foundation.core.errors import ErrorCode, public_message
from foundation.queue.base import Claim, JobQueue, Outcome
from foundation.queue.policy import DeadReason
from tests.integration import queue_support
from tests.integration.queue_support import (
    drop_lease,
    new_record,
    read_raw_record,
    stored_status,
    write_newer_record,
    write_raw_record,
)
from tests.integration.worker_harness import wait_until

make_queue = queue_support.make_queue  # per-backend fixture: redis and sqlite
MakeQueue = Callable[..., JobQueue]


def test_an_unreadable_record_is_set_aside_and_the_other_lapsed_jobs_are_reclaimed(make_queue: MakeQueue) -> None:
    q = make_queue(lease_ttl_s=0.3)
    jobs = [q.enqueue(new_record()).record for _ in range(3)]
    for _ in jobs:
        assert q.claim("dies", ["tiny-wan"]) is not None
    bad = write_raw_record(make_queue, q.get(jobs[1].id), status="paused")  # type: ignore[arg-type]
    time.sleep(0.5)  # every lease lapses
    assert q.reclaim_expired() == 2
    for good in (jobs[0], jobs[2]):
        again = q.get(good.id)
        assert again is not None and again.status is Status.queued and again.attempt == 1
    dead = [d for d in q.dead_letters() if d.job_id == jobs[1].id]
    assert len(dead) == 1 and dead[0].reason == DeadReason.invalid_record and dead[0].model == "tiny-wan"
    assert dead[0].raw == bad and dead[0].message is not None and "status" in dead[0].message
    assert q.reclaim_expired() == 0 and len(q.dead_letters()) == 1  # set aside once, not again
    claimed = {c.job_id for c in (q.claim("w2", ["tiny-wan"]), q.claim("w2", ["tiny-wan"])) if c is not None}
    assert claimed == {jobs[0].id, jobs[2].id} and q.claim("w2", ["tiny-wan"]) is None


def test_the_claim_path_sets_an_unreadable_record_aside_and_keeps_it(make_queue: MakeQueue) -> None:
    q = make_queue()
    bad_job, good_job = q.enqueue(new_record()).record, q.enqueue(new_record()).record
    bad = write_raw_record(make_queue, bad_job, status="paused")
    claim = q.claim("w1", ["tiny-wan"])
    assert claim is not None and claim.job_id == good_job.id
    assert q.finish(claim, Outcome(status=Status.succeeded))
    dead = q.dead_letters()
    assert [(d.job_id, d.reason, d.raw) for d in dead] == [(bad_job.id, DeadReason.invalid_record, bad)]
    assert q.claim("w1", ["tiny-wan"]) is None and q.depth("tiny-wan") == 0
    assert len(q.dead_letters()) == 1
    # Ended, not deleted: failed in a text every version reads, what of it validated kept (issue 50).
    ended = json.loads(read_raw_record(make_queue, bad_job) or "{}")
    assert (ended["status"], ended["error"]["code"], ended["input"]) == (
        "failed",
        "record_unreadable",
        json.loads(bad)["input"],
    )


def test_a_record_a_newer_version_wrote_is_left_to_its_workers_without_using_an_attempt(make_queue: MakeQueue) -> None:
    """A rolling upgrade: a job's record is stamped with a newer record format (its text parses here: only a
    field this version ignores is new). This version's worker leaves it, starts nothing and says so; a
    worker of the newer version (``record_format=2``, this code standing in for it) then runs it."""
    q = make_queue(lease_ttl_s=0.3)
    newer, good = q.enqueue(new_record()).record, q.enqueue(new_record()).record
    raw = write_newer_record(make_queue, newer, priority="high")
    claim = q.claim("old-worker", ["tiny-wan"])
    assert claim is not None and claim.job_id == good.id
    assert q.claim("old-worker", ["tiny-wan"]) is None
    assert stored_status(make_queue, newer) == ("queued", 0)  # never started: no attempt used
    assert read_raw_record(make_queue, newer) == raw  # nothing written
    assert [(m.job_id, m.record_format, m.failed) for m in q.newer_records()] == [(newer.id, 2, False)]
    assert q.dead_letters() == []
    upgraded = make_queue(lease_ttl_s=0.3, record_format=2)
    taken: list[Claim] = []

    def newer_worker_takes_it() -> bool:  # Redis: once the entry left pending idled past its lease
        got = upgraded.claim("new-worker", ["tiny-wan"])
        taken.extend([got] if got is not None else [])
        return bool(taken)

    wait_until(newer_worker_takes_it, "the newer worker's claim", timeout_s=15)
    assert taken[0].job_id == newer.id and taken[0].attempt == 1
    assert upgraded.finish(taken[0], Outcome(status=Status.succeeded))
    assert q.newer_records() == [] and q.dead_letters() == []


def test_a_newer_versions_record_that_no_worker_of_it_takes_fails_where_its_client_sees_it(
    make_queue: MakeQueue,
) -> None:
    """A record with a value this version does not know (a stage, beside a new field), in a newer record
    format, and no worker of that version (a rollback): left for ``newer_record_wait_s``, then failed
    ``version_unavailable`` with a dead letter, its text otherwise as the newer version wrote it."""
    q = make_queue(lease_ttl_s=0.3, newer_record_wait_s=1.0)
    newer = q.enqueue(new_record()).record
    write_newer_record(make_queue, newer, stage="reviewing", priority="high")
    assert q.claim("old-worker", ["tiny-wan"]) is None
    assert stored_status(make_queue, newer) == ("queued", 0)

    def failed() -> bool:
        q.reclaim_expired()
        return stored_status(make_queue, newer)[0] == "failed"

    wait_until(failed, "the newer version's job to fail once the wait is over", timeout_s=20)
    record = q.get(newer.id)  # readable again: its unknown stage is gone with its end
    assert record is not None and record.status is Status.failed and record.attempt == 0
    assert record.error is not None and record.error.code is ErrorCode.version_unavailable
    assert record.error.message == public_message(ErrorCode.version_unavailable)
    assert json.loads(read_raw_record(make_queue, newer) or "{}")["priority"] == "high"  # the rest kept
    [dead] = q.dead_letters()
    assert (dead.job_id, dead.reason, dead.code) == (newer.id, DeadReason.newer_record, "version_unavailable")
    assert [e.status for e in q.events(newer.id)] == [Status.queued, Status.failed]
    met = [(m.job_id, m.failed) for m in q.newer_records()]
    assert met in ([(newer.id, False), (newer.id, True)], [(newer.id, True)]), met
    assert q.reclaim_expired() == 0 and len(q.dead_letters()) == 1  # ended once


def test_a_shorter_lease_elsewhere_never_takes_a_live_job(make_queue: MakeQueue) -> None:
    """The lease that counts is the holder's: a rival configured with a lease shorter than the
    holder's renewal interval reclaims and claims all along, and takes the job only once the holder
    stops renewing and its own lease lapsed."""
    holder, rival = make_queue(lease_ttl_s=1.5), make_queue(lease_ttl_s=0.2)
    record = holder.enqueue(new_record()).record
    claim = holder.claim("holder", ["tiny-wan"])
    assert claim is not None
    for _ in range(5):  # the holder renews every 0.45 s: more than twice the rival's whole lease
        time.sleep(0.45)
        assert rival.reclaim_expired() == 0
        assert rival.claim("rival", ["tiny-wan"]) is None
        assert holder.renew(claim)
    time.sleep(0.6)  # renewals stop; past the rival's lease, not yet the holder's
    assert rival.reclaim_expired() == 0 and rival.claim("rival", ["tiny-wan"]) is None
    time.sleep(1.1)  # now past the holder's lease too
    assert rival.reclaim_expired() == 1
    again = rival.claim("rival", ["tiny-wan"])
    assert again is not None and again.job_id == record.id and again.attempt == 2
    assert not holder.renew(claim) and not holder.finish(claim, Outcome(status=Status.succeeded))
    assert rival.finish(again, Outcome(status=Status.succeeded))


def test_a_running_record_with_no_lease_is_swept_back_into_the_queue(make_queue: MakeQueue) -> None:
    q = make_queue()  # a 30 s lease: only the sweep can find the lost job in this test
    lost, live = q.enqueue(new_record()).record, q.enqueue(new_record()).record
    stranded, held = q.claim("gone", ["tiny-wan"]), q.claim("alive", ["tiny-wan"])
    assert stranded is not None and held is not None and stranded.job_id == lost.id
    drop_lease(make_queue, lost)
    assert q.claim("w2", ["tiny-wan"]) is None  # nothing waiting: the lost job is invisible to claims
    assert q.reclaim_expired() == 1
    requeued = q.get(lost.id)
    assert requeued is not None and requeued.status is Status.queued
    assert [e.reason for e in q.events(lost.id)][-1] == "lease_expired"
    assert q.renew(held) and q.get(live.id).status is Status.running  # type: ignore[union-attr]
    assert not q.renew(stranded) and not q.finish(stranded, Outcome(status=Status.succeeded))
    again = q.claim("w2", ["tiny-wan"])
    assert again is not None and again.job_id == lost.id and again.attempt == 2
    assert q.finish(again, Outcome(status=Status.succeeded)) and q.finish(held, Outcome(status=Status.succeeded))
    assert q.reclaim_expired() == 0 and q.depth("tiny-wan") == 0


def test_the_claim_paths_reclaims_are_counted_by_the_next_reclaim_expired(make_queue: MakeQueue) -> None:
    """Claims re-queue lapsed leases too; the worker's metric (``genworker_leases_reclaimed_total``)
    counts what ``reclaim_expired`` returns, so those must be in it, once."""
    q = make_queue(lease_ttl_s=0.3)
    record = q.enqueue(new_record()).record
    assert q.claim("gone", ["tiny-wan"]) is not None
    time.sleep(0.7)  # the lease lapses: nobody renews it
    again = q.claim("next", ["tiny-wan"], block_s=2)  # the claim path re-queues the job, then takes it
    assert again is not None and again.job_id == record.id and again.attempt == 2
    assert q.reclaim_expired() == 1
    assert q.reclaim_expired() == 0
