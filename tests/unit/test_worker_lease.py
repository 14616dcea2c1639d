"""Lease renewal, hang detection and per-step checkpoints against a real (SQLite) queue."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from foundation.core.catalog import load_catalog
from foundation.core.contract import Stage, Status
from foundation.core.errors import BackendUnavailable, ErrorCode, JobCanceled, JobError
from foundation.queue.base import Claim
from foundation.queue.sqlite.backend import SqliteQueue
from foundation.queue.sqlite.clock import Clock
from tests.integration.worker_harness import make_record
from worker.errors import JobInterrupted, StaleClaim
from worker.lease import LeaseKeeper
from worker.progress import JobProgress

CATALOG = load_catalog()
LEASE_S = 1.5


@pytest.fixture
def queue(tmp_path: Path) -> Iterator[SqliteQueue]:
    q = SqliteQueue(tmp_path / "queue.db", lease_ttl_s=LEASE_S)
    yield q
    q.close()


def claimed(queue: SqliteQueue, worker_id: str = "w1") -> Claim:
    queue.enqueue(make_record(CATALOG, "tiny-wan"))
    claim = queue.claim(worker_id, ["tiny-wan"])
    assert claim is not None
    return claim


class SteppedClock:
    """A monotonic clock that moves only when the test says: the queue's lease times and the keeper's
    deadlines read it, so no assertion depends on how fast a thread gets scheduled."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class CountedKeeper(LeaseKeeper):
    """The real keeper on its real thread; each finished tick is counted, so a test waits for ticks."""

    def __init__(self, queue: SqliteQueue, clock: SteppedClock) -> None:
        super().__init__(queue, LEASE_S, hang_margin_s=60, on_hang=lambda reason: None, clock=clock)
        self.ticks = 0
        self._ticked = threading.Condition()

    def tick(self) -> None:
        super().tick()
        with self._ticked:
            self.ticks += 1
            self._ticked.notify_all()

    def wait_ticks(self, count: int) -> None:
        """Until ``count`` more ticks have run in full (the first may have begun before the call)."""
        with self._ticked:
            target = self.ticks + count
            assert self._ticked.wait_for(lambda: self.ticks >= target, timeout=30), "the keeper thread never ticked"


def test_held_leases_are_renewed_and_dropped_ones_lapse(tmp_path: Path) -> None:
    clock = SteppedClock()
    queue = SqliteQueue(tmp_path / "queue.db", lease_ttl_s=LEASE_S, clock=Clock(monotonic=clock))
    keeper = CountedKeeper(queue, clock)
    keeper.start()
    try:
        claim = claimed(queue)
        lease = keeper.hold(claim, max_job_seconds=300)
        for _ in range(3):  # three steps of 2/3 of a lease: the first grant lapsed long ago
            clock.advance(LEASE_S * 2 / 3)
            keeper.wait_ticks(2)  # one whole tick after the step: the lease was renewed at this time
            assert queue.reclaim_expired() == 0  # renewed all along
        assert not lease.stale.is_set()
        keeper.drop(lease)
        clock.advance(LEASE_S * 2 / 3)
        keeper.wait_ticks(2)  # a keeper that still renewed a dropped lease would do it here
        clock.advance(LEASE_S * 2 / 3)  # past the last renewal's lease, not past one made after the drop
        assert queue.reclaim_expired() == 1  # no longer renewed: re-queued
        record = queue.get(claim.job_id)
        assert record is not None and record.status is Status.queued
    finally:
        keeper.stop()
        keeper.join()
        queue.close()


def test_a_renewal_refused_marks_the_lease_stale(queue: SqliteQueue) -> None:
    claim = claimed(queue)
    assert queue.release(claim)  # someone else ended this attempt
    keeper = LeaseKeeper(queue, LEASE_S, hang_margin_s=60, on_hang=lambda reason: None)
    lease = keeper.hold(claim, max_job_seconds=300)
    keeper.tick()
    assert lease.stale.is_set()


def test_a_job_far_past_its_limit_is_given_up_and_reported(queue: SqliteQueue) -> None:
    claim = claimed(queue)
    reasons: list[str] = []
    clock = SteppedClock()
    keeper = LeaseKeeper(queue, LEASE_S, hang_margin_s=5, on_hang=reasons.append, clock=clock)
    lease = keeper.hold(claim, max_job_seconds=10)
    clock.advance(15)  # at its limit plus the margin: still renewed
    keeper.tick()
    assert not lease.hung and reasons == []
    clock.advance(0.001)  # past them: given up, its lease left to lapse
    keeper.tick()
    assert lease.hung and claim.job_id in reasons[0]


def progress_for(queue: SqliteQueue, claim: Claim, *, limit_s: float = 300, interval_s: float = 60) -> JobProgress:
    keeper = LeaseKeeper(queue, LEASE_S, hang_margin_s=60, on_hang=lambda reason: None)
    lease = keeper.hold(claim, max_job_seconds=limit_s)
    return JobProgress(queue, lease, interval_s=interval_s, stop_now=threading.Event())


def test_progress_writes_are_throttled_but_the_last_step_is_written(queue: SqliteQueue) -> None:
    claim = claimed(queue)
    progress = progress_for(queue, claim)
    progress.enter(Stage.denoising)
    progress.on_step(1, 4)
    progress.on_step(2, 4)
    record = queue.get(claim.job_id)
    # Entering the stage wrote 0.0 just now; steps within the interval are not written.
    assert record is not None and record.stage is Stage.denoising and record.progress == 0.0
    progress.on_step(4, 4)
    record = queue.get(claim.job_id)
    assert record is not None and record.progress == 1.0


def test_cancel_flag_is_seen_at_the_next_step(queue: SqliteQueue) -> None:
    claim = claimed(queue)
    progress = progress_for(queue, claim)
    progress.enter(Stage.denoising)
    progress.on_step(1, 10)
    queue.cancel(claim.job_id)
    with pytest.raises(JobCanceled):
        progress.on_step(2, 10)


def test_a_stage_write_that_finds_the_cancel_flag_stops_the_job(queue: SqliteQueue) -> None:
    """Entering a stage is one queue call: the write answers the flag, no poll goes before it."""
    claim = claimed(queue)
    progress = progress_for(queue, claim)
    progress.enter(Stage.loading)
    queue.cancel(claim.job_id)
    with pytest.raises(JobCanceled):
        progress.enter(Stage.denoising)
    record = queue.get(claim.job_id)
    assert record is not None and record.status is Status.running and record.stage is Stage.denoising


def test_an_instant_stage_is_written_with_the_next_stage(queue: SqliteQueue) -> None:
    """Loading a resident model ends at once: no write of its own, its note comes with the next one."""
    claim = claimed(queue)
    progress = progress_for(queue, claim)
    progress.enter(Stage.loading, instant=True)
    assert queue.progress_notes(claim.job_id) == []
    progress.enter(Stage.denoising)
    record = queue.get(claim.job_id)
    assert record is not None and record.stage is Stage.denoising
    assert [n.stage for n in queue.progress_notes(claim.job_id)] == [Stage.loading, Stage.denoising]
    progress.on_step(4, 4)  # the next write notes nothing twice
    assert [n.stage for n in queue.progress_notes(claim.job_id)] == [Stage.loading, Stage.denoising, Stage.denoising]


def test_time_limit_stop_and_stale_claim_stop_the_job(queue: SqliteQueue) -> None:
    claim = claimed(queue)
    timed_out = progress_for(queue, claim, limit_s=0)
    with pytest.raises(JobError) as info:
        timed_out.on_step(1, 10)
    assert info.value.code is ErrorCode.timeout
    stopping = progress_for(queue, claim)
    stopping._stop_now.set()
    with pytest.raises(JobInterrupted):
        stopping.on_step(1, 10)
    stale = progress_for(queue, claim)
    assert queue.release(claim)
    with pytest.raises(StaleClaim):
        stale.enter(Stage.encoding)  # the write is refused: the attempt is over


class GatedWriter(ThreadPoolExecutor):
    """The runner's writer thread, held shut until ``open``: an overlapped write is still in flight."""

    def __init__(self) -> None:
        super().__init__(max_workers=1)
        self.gate = threading.Event()
        self.submit(self.gate.wait)

    def open(self) -> None:
        self.gate.set()


@pytest.fixture
def writer() -> Iterator[GatedWriter]:
    pool = GatedWriter()
    yield pool
    pool.open()
    pool.shutdown()


def overlapping(queue: SqliteQueue, claim: Claim, writer: GatedWriter) -> JobProgress:
    keeper = LeaseKeeper(queue, LEASE_S, hang_margin_s=60, on_hang=lambda reason: None)
    lease = keeper.hold(claim, max_job_seconds=300)
    return JobProgress(queue, lease, interval_s=60, stop_now=threading.Event(), writer=writer)


def test_an_overlapped_stage_starts_before_its_write_lands_and_writes_stay_in_order(
    queue: SqliteQueue, writer: GatedWriter
) -> None:
    claim = claimed(queue)
    progress = overlapping(queue, claim, writer)
    progress.enter(Stage.loading, instant=True)
    progress.enter(Stage.denoising, overlap=True)  # returns with the write still queued behind the gate
    record = queue.get(claim.job_id)
    assert record is not None and record.stage is Stage.queued
    writer.open()
    progress.on_step(4, 4)  # takes the stage write's answer, then writes its own
    record = queue.get(claim.job_id)
    assert record is not None and (record.stage, record.progress) == (Stage.denoising, 1.0)
    notes = [(n.stage, n.progress) for n in queue.progress_notes(claim.job_id)]
    assert notes == [(Stage.loading, 0.0), (Stage.denoising, 0.0), (Stage.denoising, 1.0)]


def test_a_cancel_found_by_an_overlapped_write_stops_the_job_at_the_first_step(
    queue: SqliteQueue, writer: GatedWriter
) -> None:
    claim = claimed(queue)
    progress = overlapping(queue, claim, writer)
    queue.cancel(claim.job_id)
    progress.enter(Stage.denoising, overlap=True)
    writer.open()
    with pytest.raises(JobCanceled):
        progress.on_step(1, 10)
    record = queue.get(claim.job_id)
    assert record is not None and record.status is Status.running and record.stage is Stage.denoising


def test_a_stale_claim_found_by_an_overlapped_write_stops_the_job_at_the_first_step(
    queue: SqliteQueue, writer: GatedWriter
) -> None:
    claim = claimed(queue)
    progress = overlapping(queue, claim, writer)
    assert queue.release(claim)  # the attempt is over before its first write
    progress.enter(Stage.denoising, overlap=True)
    writer.open()
    with pytest.raises(StaleClaim):
        progress.on_step(1, 10)
    assert progress._lease.stale.is_set()


def test_what_an_overlapped_write_found_ends_the_attempt_before_what_the_work_raised_after_it(
    queue: SqliteQueue, writer: GatedWriter
) -> None:
    claim = claimed(queue)
    progress = overlapping(queue, claim, writer)
    progress.enter(Stage.denoising, overlap=True)
    writer.open()
    failure = RuntimeError("the model raised before its first step")
    assert progress.ended_by(failure) is failure  # the write found nothing: the work's error ends it
    queue.cancel(claim.job_id)
    progress.enter(Stage.decoding, overlap=True)
    assert isinstance(progress.ended_by(failure), JobCanceled)  # sent first, so it wins


class FlakyRenewals(SqliteQueue):
    """A real SQLite queue whose ``renew`` raises for chosen jobs: the backend down for one key
    (``BackendUnavailable``) or a bug (anything else)."""

    def __init__(self, path: Path, lease_ttl_s: float, failing: dict[str, Exception], clock: Clock) -> None:
        super().__init__(path, lease_ttl_s=lease_ttl_s, clock=clock)
        self.failing = failing

    def renew(self, claim: Claim) -> bool:
        if claim.job_id in self.failing:
            raise self.failing[claim.job_id]
        return super().renew(claim)


def test_one_renewal_that_raises_does_not_skip_the_others(tmp_path: Path) -> None:
    lease_s = 0.6
    failing: dict[str, Exception] = {}
    clock = SteppedClock()
    queue = FlakyRenewals(tmp_path / "queue.db", lease_s, failing, Clock(monotonic=clock))
    try:
        down, buggy, healthy = claimed(queue), claimed(queue), claimed(queue)
        failing[down.job_id] = BackendUnavailable("redis unavailable: TimeoutError")
        failing[buggy.job_id] = RuntimeError("a bug in one renewal")
        keeper = LeaseKeeper(queue, lease_s, hang_margin_s=60, on_hang=lambda reason: None, clock=clock)
        leases = [keeper.hold(c, max_job_seconds=300) for c in (down, buggy, healthy)]  # failing ones first
        clock.advance(lease_s * 0.7)
        keeper.tick()  # must not raise, and must renew ``healthy`` after the two that raise
        clock.advance(lease_s * 0.7)  # past the first grant: only a renewed lease is still live
        assert queue.reclaim_expired() == 2
        statuses = {c.job_id: queue.get(c.job_id).status for c in (down, buggy, healthy)}  # type: ignore[union-attr]
        assert statuses == {down.job_id: Status.queued, buggy.job_id: Status.queued, healthy.job_id: Status.running}
        assert not any(lease.stale.is_set() for lease in leases)  # an error is not a refusal
    finally:
        queue.close()
