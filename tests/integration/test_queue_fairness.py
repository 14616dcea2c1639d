"""Fair share by project and the per-project caps, on both backends (a real redis-server and a SQLite file)."""

from __future__ import annotations

import sqlite3
from collections import Counter
from collections.abc import Callable
from contextlib import closing

import pytest
import redis

from foundation.core.contract import RecordParameters, Status
from foundation.queue import keys
from foundation.queue.base import JobQueue, Outcome
from foundation.queue.errors import ProjectQueueFull
from foundation.queue.fairness import FairShare, ProjectShare
from tests.integration import queue_support
from tests.integration.queue_support import new_record

make_queue = queue_support.make_queue
MakeQueue = Callable[..., JobQueue]


def _done(queue: JobQueue, claim_count: int) -> list[str]:
    """Claim and finish ``claim_count`` jobs with one worker; the project of each, in claim order."""
    served = []
    for _ in range(claim_count):
        claim = queue.claim("w1", ["tiny-wan"])
        assert claim is not None
        served.append(claim.record.project)
        assert queue.finish(claim, Outcome(status=Status.succeeded))
    return served


def test_a_late_project_starts_within_two_claims(make_queue: MakeQueue) -> None:
    queue = make_queue()
    alpha = [queue.enqueue(new_record(project="alpha")).record.id for _ in range(20)]
    beta = queue.enqueue(new_record(project="beta")).record.id
    served = []
    for _ in range(21):
        claim = queue.claim("w1", ["tiny-wan"])
        assert claim is not None
        served.append(claim.job_id)
        assert queue.finish(claim, Outcome(status=Status.succeeded))
    assert beta in served[:2], served.index(beta)
    # A project's own jobs stay first in, first out; every job ran once.
    assert [j for j in served if j != beta] == alpha
    assert queue.claim("w1", ["tiny-wan"]) is None


def test_a_project_that_comes_back_is_not_served_out_of_turn_for_long(make_queue: MakeQueue) -> None:
    # The late joiner starts at the pool's clock: no credit hoarded while it was away.
    queue = make_queue()
    for _ in range(6):
        queue.enqueue(new_record(project="alpha"))
    queue.enqueue(new_record(project="beta"))
    assert _done(queue, 2).count("beta") == 1
    for _ in range(4):
        queue.enqueue(new_record(project="beta"))
    served = _done(queue, 8)
    # Both backlogged at weight 1: they alternate (never two of one project while the other waits twice).
    assert Counter(served[:6]) == Counter({"alpha": 3, "beta": 3}), served


def test_weights_split_claims_three_to_one(make_queue: MakeQueue) -> None:
    fair = FairShare(projects={"paid": ProjectShare(weight=3)})
    queue = make_queue(fair=fair)
    for _ in range(40):
        queue.enqueue(new_record(project="free"))
        queue.enqueue(new_record(project="paid"))
    counts = Counter(_done(queue, 40))
    assert abs(counts["paid"] - 30) <= 1 and abs(counts["free"] - 10) <= 1, counts


def test_turns_are_charged_by_the_estimated_gpu_time(make_queue: MakeQueue) -> None:
    # One 10 s 720p clip costs as much as about 250 one-second 144p ones (fairness.job_cost).
    queue = make_queue()
    long_clip = RecordParameters(resolution="720p", duration_seconds=10, ratio="16:9")
    for _ in range(5):
        queue.enqueue(new_record(project="big").model_copy(update={"parameters": long_clip}))
    for _ in range(30):
        queue.enqueue(new_record(project="small"))
    served = _done(queue, 20)
    assert served.count("big") == 1, served


def test_fairness_off_is_plain_fifo(make_queue: MakeQueue) -> None:
    queue = make_queue(fair=FairShare(enabled=False))
    order = [queue.enqueue(new_record(project=p)).record.project for p in ["a"] * 5 + ["b"]]
    assert _done(queue, 6) == order


def test_max_running_holds_across_three_workers(make_queue: MakeQueue) -> None:
    fair = FairShare(projects={"capped": ProjectShare(max_running=1)})
    api = make_queue(fair=fair)
    workers = [make_queue(fair=fair) for _ in range(3)]
    capped = [api.enqueue(new_record(project="capped")).record.id for _ in range(3)]
    other = api.enqueue(new_record(project="other")).record.id
    first = workers[0].claim("w0", ["tiny-wan"])
    second = workers[1].claim("w1", ["tiny-wan"])
    assert first is not None and second is not None
    assert {first.job_id, second.job_id} == {capped[0], other}
    # The third worker finds only the capped project's jobs: they wait, they are not failed.
    assert workers[2].claim("w2", ["tiny-wan"]) is None
    assert all(api.get(j).status is Status.queued for j in capped[1:])  # type: ignore[union-attr]
    held = first if first.job_id == capped[0] else second
    owner = workers[0] if held is first else workers[1]
    assert owner.finish(held, Outcome(status=Status.succeeded))
    nxt = workers[2].claim("w2", ["tiny-wan"])
    assert nxt is not None and nxt.job_id == capped[1]
    assert workers[0].claim("w0", ["tiny-wan"]) is None  # still one of "capped" running


def test_max_queued_refuses_and_a_retried_create_is_accepted_once(make_queue: MakeQueue) -> None:
    fair = FairShare(max_queued=2)
    queue = make_queue(fair=fair)
    queue.enqueue(new_record(project="p"))
    queue.enqueue(new_record(project="p"))
    late = new_record(project="p")
    with pytest.raises(ProjectQueueFull):
        queue.enqueue(late, idempotency_key="k1", request_hash="h")
    assert queue.get(late.id) is None and queue.depth("tiny-wan") == 2
    # Another project has its own room.
    assert queue.enqueue(new_record(project="q")).record.status is Status.queued
    claim = queue.claim("w1", ["tiny-wan"])
    assert claim is not None and claim.record.project == "p"
    first = queue.enqueue(late, idempotency_key="k1", request_hash="h")
    again = queue.enqueue(new_record(project="p"), idempotency_key="k1", request_hash="h")
    assert not first.replayed and again.replayed and again.record.id == first.record.id == late.id


def test_canceled_queued_jobs_leave_the_fair_order(make_queue: MakeQueue) -> None:
    queue = make_queue()
    gone = [queue.enqueue(new_record(project="alpha")).record.id for _ in range(3)]
    kept = queue.enqueue(new_record(project="beta")).record.id
    for job_id in gone:
        assert queue.cancel(job_id).status is Status.canceled
    claim = queue.claim("w1", ["tiny-wan"])
    assert claim is not None and claim.job_id == kept
    assert queue.claim("w1", ["tiny-wan"]) is None and queue.depth("tiny-wan") == 0


def test_positions_follow_the_fair_order(make_queue: MakeQueue) -> None:
    queue = make_queue()
    alpha = [queue.enqueue(new_record(project="alpha")).record.id for _ in range(6)]
    beta = [queue.enqueue(new_record(project="beta")).record.id for _ in range(2)]
    positions = {job_id: queue.position(job_id) for job_id in alpha + beta}
    started = []
    while (claim := queue.claim("w1", ["tiny-wan"])) is not None:
        started.append(claim.job_id)
        assert queue.finish(claim, Outcome(status=Status.succeeded))
    # The documented bound (equal weights): never fewer than the jobs that started before it, exact while
    # every project still has a backlog (beta's 2 jobs: the first four places), never past the depth.
    for place, job_id in enumerate(started):
        reported = positions[job_id]
        assert reported is not None and place <= reported <= 7, (place, reported)
        if place < 4:
            assert reported == place, (place, reported)


def _as_before_fair_share(make_queue: MakeQueue, job_ids: list[str]) -> None:
    """Make the store look as the version before fair share left it: Redis job hashes without ``project``
    (their entries are in the stream already), a SQLite file without the fair-share tables."""
    location = make_queue.location  # type: ignore[attr-defined]
    if make_queue.backend == "redis":  # type: ignore[attr-defined]
        with closing(redis.Redis.from_url(location)) as client:
            for job_id in job_ids:
                client.hdel(keys.job_record("tiny-wan", job_id), "project")
        return
    with closing(sqlite3.connect(location)) as conn:
        conn.execute("DROP TABLE fair_projects")
        conn.execute("DROP TABLE fair_clock")
        conn.commit()


def test_jobs_queued_before_the_upgrade_are_all_claimed_after_it(make_queue: MakeQueue) -> None:
    old = make_queue(fair=FairShare(enabled=False))
    before = [old.enqueue(new_record(project="alpha" if i % 3 else "beta")).record.id for i in range(9)]
    old.close()
    _as_before_fair_share(make_queue, before)
    new = make_queue()  # fair share on, the default
    after = [new.enqueue(new_record(project="gamma")).record.id for _ in range(3)]
    assert new.depth("tiny-wan") == 12
    started = []
    while (claim := new.claim("w1", ["tiny-wan"])) is not None:
        started.append(claim.job_id)
        assert new.finish(claim, Outcome(status=Status.succeeded))
    assert sorted(started) == sorted(before + after) and len(started) == 12  # none lost, none twice
    assert all(new.get(j).status is Status.succeeded for j in before + after)  # type: ignore[union-attr]
    assert new.depth("tiny-wan") == 0


def test_backlog_counts_projects_and_the_oldest_wait(make_queue: MakeQueue) -> None:
    queue = make_queue()
    assert queue.backlog("tiny-wan").oldest_age_s is None
    for project in ("alpha", "alpha", "beta"):
        queue.enqueue(new_record(project=project))
    backlog = queue.backlog("tiny-wan")
    assert backlog.projects == 2 and backlog.oldest_age_s is not None and 0 <= backlog.oldest_age_s < 60
    _done(queue, 3)
    assert queue.backlog("tiny-wan").oldest_age_s is None
