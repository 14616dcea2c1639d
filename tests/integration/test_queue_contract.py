"""The queue contract, run against both backends (a real redis-server and a SQLite file)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest

from foundation.core.contract import ErrorInfo, Money, Stage, Status, Usage
from foundation.core.errors import ErrorCode, IdempotencyConflict, UnknownJob
from foundation.queue.base import JobQueue, Outcome, ProgressWrite, WorkerHeartbeat
from foundation.queue.policy import DeadReason, ReleaseReason
from tests.integration import queue_support
from tests.integration.queue_support import new_record, video_artifact

# The per-backend fixtures (redis, sqlite): every test here runs against both.
make_queue = queue_support.make_queue
queue = queue_support.queue
MakeQueue = Callable[..., JobQueue]


def _success() -> Outcome:
    video = video_artifact("generations/x/1/video.mp4")
    return Outcome(
        status=Status.succeeded,
        artifacts=[video],
        usage=Usage(output_seconds=1.0, gpu_seconds=0.5),
        price=Money(amount="0.05"),
        actual_prompt="a red fox, cinematic",
    )


def test_enqueue_claim_finish(queue: JobQueue) -> None:
    record = queue.enqueue(new_record()).record
    stored = queue.get(record.id)
    assert stored is not None and stored.status is Status.queued and stored.updated_at is not None
    assert queue.depth("tiny-wan") == 1 and queue.position(record.id) == 0

    claim = queue.claim("w1", ["tiny-wan"])
    assert claim is not None and claim.job_id == record.id and claim.attempt == 1
    running = queue.get(record.id)
    assert running is not None and running.status is Status.running and running.started_at is not None
    assert queue.depth("tiny-wan") == 0 and queue.position(record.id) is None
    assert queue.progress(claim, Stage.denoising, 0.5)
    assert queue.get(record.id).stage is Stage.denoising  # type: ignore[union-attr]

    assert queue.finish(claim, _success())
    done = queue.get(record.id)
    assert done is not None and done.status is Status.succeeded and done.finished_at is not None
    assert done.artifacts[0].sha256 == "0" * 64 and done.usage == Usage(output_seconds=1.0, gpu_seconds=0.5)
    assert done.price == Money(amount="0.05") and done.actual_prompt == "a red fox, cinematic"
    assert done.started_at == running.started_at and done.progress == 1.0
    assert queue.claim("w1", ["tiny-wan"]) is None
    # A finished attempt accepts nothing more.
    assert not queue.progress(claim, Stage.uploading, 0.9)
    assert not queue.finish(claim, Outcome(status=Status.failed))
    assert not queue.renew(claim)
    assert [e.status for e in queue.events(record.id)] == [Status.queued, Status.running, Status.succeeded]


def test_claim_only_from_hosted_models(queue: JobQueue) -> None:
    queue.enqueue(new_record(model="tiny-ltx2"))
    assert queue.claim("w1", ["tiny-wan"]) is None
    claim = queue.claim("w1", ["tiny-wan", "tiny-ltx2"])
    assert claim is not None and claim.model == "tiny-ltx2"


def test_two_consumers_never_hold_one_job(make_queue: MakeQueue) -> None:
    producer = make_queue()
    ids = {producer.enqueue(new_record()).record.id for _ in range(40)}
    got: list[str] = []
    lock = threading.Lock()

    def consume(name: str) -> None:
        q = make_queue()
        while (claim := q.claim(name, ["tiny-wan"])) is not None:
            with lock:
                got.append(claim.job_id)
            assert q.finish(claim, _success())

    threads = [threading.Thread(target=consume, args=(f"w{i}",)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert len(got) == len(set(got)) == 40 and set(got) == ids
    assert all(producer.get(i).attempt == 1 for i in ids)  # type: ignore[union-attr]


@pytest.mark.slow
def test_renewed_lease_survives_many_lease_periods(make_queue: MakeQueue) -> None:
    """The owner renews and a rival tries to take the job right after each renewal, until the claim is four
    leases old: the rival never gets it. Owner and rival take turns in one thread, so what a turn shows is
    decided by the renewal itself, not by how soon a renewer thread is scheduled (a turn is milliseconds
    against a 0.5 s lease, however long the pause between turns). Then the renewals stop, and the rival
    takes the job once its lease lapses: the turns saw a rival able to take a lease nobody renews."""
    lease_s = 0.5
    owner, rival = make_queue(lease_ttl_s=lease_s), make_queue(lease_ttl_s=lease_s)
    record = owner.enqueue(new_record()).record
    claim = owner.claim("owner", ["tiny-wan"])
    assert claim is not None
    claimed_at = time.monotonic()
    turns = 0
    while turns < 8 or time.monotonic() - claimed_at < 4 * lease_s:
        turn_started = time.monotonic()
        assert owner.renew(claim)
        rival.reclaim_expired()
        stolen = rival.claim("rival", ["tiny-wan"])
        assert stolen is None, f"taken {time.monotonic() - turn_started:.3f} s after a renewal"
        turns += 1
        time.sleep(lease_s / 4)  # pacing only: a longer pause changes nothing the turns assert
    taken = None
    until = time.monotonic() + 30  # a bound for a broken reclaim, not a margin: it ends as soon as taken
    while taken is None and time.monotonic() < until:
        rival.reclaim_expired()
        taken = rival.claim("rival", ["tiny-wan"], block_s=0.1)
    assert taken is not None and taken.job_id == record.id and taken.attempt == 2
    assert not owner.renew(claim) and not owner.finish(claim, _success())


def test_lapsed_lease_is_redelivered_and_the_stale_attempt_is_refused(make_queue: MakeQueue) -> None:
    first, second = make_queue(lease_ttl_s=0.3), make_queue(lease_ttl_s=0.3)
    record = first.enqueue(new_record()).record
    stale = first.claim("dies", ["tiny-wan"])
    assert stale is not None
    time.sleep(0.5)  # no renewal: the lease lapses
    fresh = second.claim("lives", ["tiny-wan"], block_s=5)
    assert fresh is not None and fresh.job_id == record.id and fresh.attempt == 2
    assert not first.renew(stale)
    assert not first.progress(stale, Stage.encoding, 0.9)
    assert not first.finish(stale, _success())
    assert not first.retry(stale, ErrorInfo(code=ErrorCode.upload_failed, message="x"), delay_s=0)
    assert not first.release(stale)
    assert second.finish(fresh, _success())
    assert not first.finish(stale, Outcome(status=Status.failed))
    done = second.get(record.id)
    assert done is not None and done.status is Status.succeeded and done.attempt == 2
    statuses = [(e.status, e.attempt) for e in second.events(record.id)]
    assert statuses == [
        (Status.queued, 0),
        (Status.running, 1),
        (Status.queued, 1),
        (Status.running, 2),
        (Status.succeeded, 2),
    ]


def test_cancel_before_claim(queue: JobQueue) -> None:
    record = queue.enqueue(new_record()).record
    canceled = queue.cancel(record.id)
    assert canceled.status is Status.canceled and canceled.finished_at is not None
    assert queue.claim("w1", ["tiny-wan"]) is None
    assert queue.depth("tiny-wan") == 0 and queue.position(record.id) is None
    assert queue.cancel(record.id).status is Status.canceled  # terminal: unchanged
    assert [e.status for e in queue.events(record.id)] == [Status.queued, Status.canceled]


def test_cancel_while_running_sets_the_flag(make_queue: MakeQueue) -> None:
    api, worker = make_queue(), make_queue()
    record = api.enqueue(new_record()).record
    claim = worker.claim("w1", ["tiny-wan"])
    assert claim is not None and not worker.cancel_requested(record.id)
    flagged = api.cancel(record.id)
    assert flagged.status is Status.running and flagged.cancel_requested
    assert worker.cancel_requested(record.id)
    assert worker.progress(claim, Stage.denoising, 0.3)  # the flag survives later progress writes
    assert worker.cancel_requested(record.id)
    assert worker.finish(claim, Outcome(status=Status.canceled))
    done = api.get(record.id)
    assert done is not None and done.status is Status.canceled and done.cancel_requested
    with pytest.raises(UnknownJob):
        api.cancel("gen_does_not_exist")


def test_retry_then_dead_letter_keeps_the_error(make_queue: MakeQueue) -> None:
    q = make_queue(max_attempts=2)
    record = q.enqueue(new_record()).record
    first = q.claim("w1", ["tiny-wan"])
    assert first is not None
    assert q.retry(first, ErrorInfo(code=ErrorCode.upload_failed, message="store down"), delay_s=0)
    waiting = q.get(record.id)
    assert waiting is not None and waiting.status is Status.queued and waiting.error is not None
    second = q.claim("w1", ["tiny-wan"])
    assert second is not None and second.attempt == 2
    assert q.retry(second, ErrorInfo(code=ErrorCode.upload_failed, message="store still down"), delay_s=0)
    failed = q.get(record.id)
    assert failed is not None and failed.status is Status.failed and failed.finished_at is not None
    assert failed.error == ErrorInfo(code=ErrorCode.upload_failed, message="store still down")
    assert q.claim("w1", ["tiny-wan"]) is None
    dead = [d for d in q.dead_letters() if d.job_id == record.id]
    assert len(dead) == 1 and dead[0].code == "upload_failed" and dead[0].message == "store still down"
    assert dead[0].reason == "out of attempts" and dead[0].model == "tiny-wan" and dead[0].id
    assert [e.status for e in q.events(record.id)] == [
        Status.queued,
        Status.running,
        Status.queued,
        Status.running,
        Status.failed,
    ]


def test_a_progress_write_answers_the_cancel_flag_it_found(make_queue: MakeQueue) -> None:
    """``write_progress`` tells the worker whether to stop, as of the write: no poll of its own."""
    api, worker = make_queue(), make_queue()
    record = api.enqueue(new_record()).record
    claim = worker.claim("w1", ["tiny-wan"])
    assert claim is not None
    assert worker.write_progress(claim, Stage.loading, 0.0) == ProgressWrite(accepted=True, cancel_requested=False)
    api.cancel(record.id)
    assert worker.write_progress(claim, Stage.denoising, 0.0) == ProgressWrite(accepted=True, cancel_requested=True)
    stored = api.get(record.id)
    assert stored is not None and stored.stage is Stage.denoising and stored.cancel_requested
    assert worker.finish(claim, Outcome(status=Status.canceled))
    assert worker.write_progress(claim, Stage.denoising, 0.5) == ProgressWrite(accepted=False, cancel_requested=False)
    assert [(n.stage, n.progress) for n in api.progress_notes(record.id)] == [
        (Stage.loading, 0.0),
        (Stage.denoising, 0.0),
    ]


def test_a_stage_passed_at_once_is_noted_with_the_next_write(queue: JobQueue) -> None:
    """``passed``: a stage entered and left at once gets its note, in order, in the next write; the
    record goes straight to the written stage."""
    record = queue.enqueue(new_record()).record
    claim = queue.claim("w1", ["tiny-wan"])
    assert claim is not None
    written = queue.write_progress(claim, Stage.denoising, 0.0, passed=[Stage.loading])
    assert written == ProgressWrite(accepted=True, cancel_requested=False)
    stored = queue.get(record.id)
    assert stored is not None and (stored.stage, stored.progress) == (Stage.denoising, 0.0)
    notes = [(n.attempt, n.stage, n.progress) for n in queue.progress_notes(record.id)]
    assert notes == [(1, Stage.loading, 0.0), (1, Stage.denoising, 0.0)]
    assert queue.finish(claim, Outcome(status=Status.succeeded))
    refused = queue.write_progress(claim, Stage.encoding, 0.0, passed=[Stage.decoding])
    assert not refused.accepted and len(queue.progress_notes(record.id)) == 2


def test_retry_waits_for_its_backoff(queue: JobQueue) -> None:
    record = queue.enqueue(new_record()).record
    claim = queue.claim("w1", ["tiny-wan"])
    assert claim is not None
    assert queue.retry(claim, ErrorInfo(code=ErrorCode.upload_failed, message="x"), delay_s=0.6)
    assert queue.claim("w1", ["tiny-wan"]) is None  # not due yet
    assert queue.depth("tiny-wan") == 1 and queue.position(record.id) == 0
    again = queue.claim("w1", ["tiny-wan"], block_s=10)
    assert again is not None and again.job_id == record.id and again.attempt == 2


def test_lapsed_lease_on_the_last_attempt_fails_worker_lost(make_queue: MakeQueue) -> None:
    q = make_queue(lease_ttl_s=0.3, max_attempts=1)
    record = q.enqueue(new_record()).record
    assert q.claim("dies", ["tiny-wan"]) is not None
    time.sleep(0.5)
    assert q.reclaim_expired() == 1
    failed = q.get(record.id)
    assert failed is not None and failed.status is Status.failed and failed.error is not None
    assert failed.error.code is ErrorCode.worker_lost
    assert [d.reason for d in q.dead_letters() if d.job_id == record.id] == ["worker_lost"]


def test_release_redelivers_without_using_up_an_attempt(queue: JobQueue) -> None:
    q = queue
    record = q.enqueue(new_record()).record  # max_attempts 3
    for expected_attempt in (1, 2, 3):
        claim = q.claim("draining", ["tiny-wan"])
        assert claim is not None and claim.attempt == expected_attempt
        assert q.release(claim)
        assert q.get(record.id).status is Status.queued  # type: ignore[union-attr]
    # Three releases used no attempts: a transient failure now is retried, not dead-lettered.
    claim = q.claim("w1", ["tiny-wan"])
    assert claim is not None and claim.attempt == 4
    assert q.retry(claim, ErrorInfo(code=ErrorCode.upload_failed, message="x"), delay_s=0)
    assert q.get(record.id).status is Status.queued  # type: ignore[union-attr]


def test_a_release_says_why_in_its_event(queue: JobQueue) -> None:
    record = queue.enqueue(new_record()).record
    for reason in (None, "model_load"):
        claim = queue.claim("w1", ["tiny-wan"])
        assert claim is not None and queue.release(claim, reason=reason)
    released = [e.reason for e in queue.events(record.id) if e.status is Status.queued][1:]
    assert released == ["released", "released: model_load"]


def test_a_hung_release_uses_up_an_attempt_and_the_last_one_dead_letters(queue: JobQueue) -> None:
    q = queue
    record = q.enqueue(new_record()).record  # max_attempts 3
    reasons = [None, ReleaseReason.hung, "model_load", ReleaseReason.hung, ReleaseReason.hung]
    for expected_attempt, reason in enumerate(reasons, start=1):  # the free releases in between use none
        claim = q.claim("w1", ["tiny-wan"])
        assert claim is not None and claim.attempt == expected_attempt
        assert q.release(claim, reason=reason)
    # The third hung release used up the last attempt: failed and dead-lettered, never re-delivered.
    failed = q.get(record.id)
    assert failed is not None and failed.status is Status.failed and failed.attempt == 5
    assert failed.error is not None and failed.error.code is ErrorCode.worker_lost
    events = [e.reason for e in q.events(record.id)][1:]
    assert events[1::2] == ["released", "released: hung", "released: model_load", "released: hung", events[-1]]
    assert events[-1] == "failed: worker_lost (worker_lost)"
    [dead] = [d for d in q.dead_letters() if d.job_id == record.id]
    assert dead.reason == DeadReason.worker_lost and dead.code == ErrorCode.worker_lost.value
    assert q.depth("tiny-wan") == 0 and q.claim("w2", ["tiny-wan"]) is None


def test_events_are_ordered_and_resumable(queue: JobQueue) -> None:
    a = queue.enqueue(new_record()).record
    b = queue.enqueue(new_record(model="tiny-ltx2")).record
    claim = queue.claim("w1", ["tiny-wan"])
    assert claim is not None and queue.finish(claim, _success())
    everything = queue.events()
    # Per job the order is exact; across models (Redis: one stream per model) ties within one
    # millisecond may interleave, so the feed is checked per job.
    assert [e.status for e in everything if e.job_id == a.id] == [Status.queued, Status.running, Status.succeeded]
    assert [e.status for e in everything if e.job_id == b.id] == [Status.queued]
    assert [e.reason for e in queue.events(a.id)] == ["enqueued", "claimed by w1", "succeeded"]
    assert len({e.id for e in everything}) == 4
    # Reading on from any event's id gives exactly the rest of the feed.
    for i, event in enumerate(everything):
        assert queue.events(after=event.id) == everything[i + 1 :]
    assert queue.events(limit=2) == everything[:2]
    own = queue.events(a.id)
    assert queue.events(a.id, after=own[0].id) == own[1:]


def test_progress_notes_keep_every_accepted_write_in_order(make_queue: MakeQueue) -> None:
    """What the live event stream replays: each fenced progress write, once, resumable by id; a
    stale attempt's write is refused and leaves no note; the feed of events is unchanged."""
    queue = make_queue(lease_ttl_s=0.3)
    job = queue.enqueue(new_record()).record
    assert queue.progress_notes(job.id) == [] and queue.progress_notes("gen_none") == []
    stale = queue.claim("w1", ["tiny-wan"])
    assert stale is not None and queue.progress(stale, Stage.loading, 0.0)
    time.sleep(0.5)
    assert queue.reclaim_expired() == 1
    claim = queue.claim("w2", ["tiny-wan"])
    assert claim is not None and claim.attempt == 2
    assert not queue.progress(stale, Stage.denoising, 0.5)  # fenced: no note either
    for stage, value in [(Stage.denoising, 0.0), (Stage.denoising, 0.5), (Stage.encoding, 0.0)]:
        assert queue.progress(claim, stage, value)
    notes = queue.progress_notes(job.id)
    assert [(n.attempt, n.stage, n.progress) for n in notes] == [
        (1, Stage.loading, 0.0),
        (2, Stage.denoising, 0.0),
        (2, Stage.denoising, 0.5),
        (2, Stage.encoding, 0.0),
    ]
    assert len({n.id for n in notes}) == 4
    for i, note in enumerate(notes):
        assert queue.progress_notes(job.id, after=note.id) == notes[i + 1 :]
    assert queue.progress_notes(job.id, limit=2) == notes[:2]
    assert [e.status for e in queue.events(job.id)] == [Status.queued, Status.running, Status.queued, Status.running]


def test_idempotent_enqueue(queue: JobQueue) -> None:
    first = queue.enqueue(new_record(), idempotency_key="k1", request_hash="h1")
    assert not first.replayed
    again = queue.enqueue(new_record(), idempotency_key="k1", request_hash="h1")
    assert again.replayed and again.record.id == first.record.id
    with pytest.raises(IdempotencyConflict) as conflict:
        queue.enqueue(new_record(), idempotency_key="k1", request_hash="h2")
    assert conflict.value.job_id == first.record.id
    other_project = queue.enqueue(new_record(project="proj-b"), idempotency_key="k1", request_hash="h2")
    assert not other_project.replayed and other_project.record.id != first.record.id
    assert len(queue.list_jobs("proj-a")[0]) == 1


def test_concurrent_creates_with_one_key_make_one_job(make_queue: MakeQueue) -> None:
    results: list[str] = []
    lock = threading.Lock()
    barrier = threading.Barrier(8)

    def create() -> None:
        q = make_queue()
        barrier.wait()
        res = q.enqueue(new_record(), idempotency_key="same", request_hash="h")
        with lock:
            results.append(res.record.id)

    threads = [threading.Thread(target=create) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    reader = make_queue()
    assert len(results) == 8 and len(set(results)) == 1
    assert [r.id for r in reader.list_jobs("proj-a")[0]] == [results[0]]
    assert reader.depth("tiny-wan") == 1


def test_warm_model_first_without_starving_cold_ones(make_queue: MakeQueue) -> None:
    patient, strict = make_queue(starve_after_s=3600), make_queue(starve_after_s=0.2)
    cold = patient.enqueue(new_record(model="tiny-ltx2")).record
    warm = [patient.enqueue(new_record()).record for _ in range(2)]
    # The cold job is older, yet a worker with tiny-wan loaded takes tiny-wan first.
    first = patient.claim("w1", ["tiny-ltx2", "tiny-wan"], prefer=["tiny-wan"])
    assert first is not None and first.job_id == warm[0].id
    # Once the cold job has waited past the bound, it is served before more warm work.
    time.sleep(0.4)
    second = strict.claim("w1", ["tiny-ltx2", "tiny-wan"], prefer=["tiny-wan"])
    assert second is not None and second.job_id == cold.id
    # Without preference, the oldest waiting job goes first.
    third = patient.claim("w2", ["tiny-ltx2", "tiny-wan"])
    assert third is not None and third.job_id == warm[1].id


def test_depth_and_position(queue: JobQueue) -> None:
    ids = [queue.enqueue(new_record()).record.id for _ in range(3)]
    other = queue.enqueue(new_record(model="tiny-ltx2")).record.id
    assert queue.depth("tiny-wan") == 3 and queue.depth("tiny-ltx2") == 1 and queue.depth("nothing") == 0
    assert [queue.position(i) for i in ids] == [0, 1, 2] and queue.position(other) == 0
    claim = queue.claim("w1", ["tiny-wan"])
    assert claim is not None and claim.job_id == ids[0]
    assert [queue.position(i) for i in ids] == [None, 0, 1]
    queue.cancel(ids[1])
    assert queue.position(ids[2]) == 0 and queue.depth("tiny-wan") == 1
    assert queue.position("gen_unknown") is None


def test_heartbeats_expire(queue: JobQueue) -> None:
    beat = WorkerHeartbeat(worker_id="gpu-1", hosted_models=["tiny-wan"], loaded_models=["tiny-wan"], ready=True)
    queue.heartbeat(beat, ttl_s=0.4)
    queue.heartbeat(WorkerHeartbeat(worker_id="gpu-2", hosted_models=["tiny-ltx2"]), ttl_s=60)
    live = queue.live_workers()
    assert [w.worker_id for w in live] == ["gpu-1", "gpu-2"] and live[0].loaded_models == ["tiny-wan"]
    time.sleep(0.6)
    assert [w.worker_id for w in queue.live_workers()] == ["gpu-2"]


def test_list_jobs_pages_newest_first(queue: JobQueue) -> None:
    mine = [queue.enqueue(new_record()).record for _ in range(5)]
    queue.enqueue(new_record(project="proj-b"))
    seen: list[str] = []
    cursor: str | None = None
    pages = 0
    while True:
        page, cursor = queue.list_jobs("proj-a", limit=2, cursor=cursor)
        seen += [r.id for r in page]
        pages += 1
        if cursor is None:
            break
    expected = [r.id for r in sorted(mine, key=lambda r: (r.created_at, r.id), reverse=True)]
    assert seen == expected and pages == 3
    assert queue.list_jobs("nobody") == ([], None)


def test_unknown_ids(queue: JobQueue) -> None:
    assert queue.get("gen_missing") is None and queue.position("gen_missing") is None
    assert not queue.cancel_requested("gen_missing")
    with pytest.raises(UnknownJob):
        queue.cancel("gen_missing")
