"""The sweeper removes what killed workers and expired records leave, and keeps all a record points at.

Real stores (a local directory and S3 on SeaweedFS) and a real SQLite queue. Work dirs are named as
the runner's ``mkdtemp`` names them; a killed worker is one that left its dir and never finished.
The sweeper's clock runs ahead of the files' (``now``), so "old" needs no waiting.
"""

from __future__ import annotations

import os
import tempfile
import time
import uuid
from pathlib import Path

import pytest

from foundation.core.contract import Status
from foundation.queue.base import Claim, Outcome
from foundation.queue.sqlite.backend import SqliteQueue
from foundation.stores.base import ArtifactStore, artifact_key
from foundation.stores.local import LocalStore
from foundation.stores.s3 import S3Store
from tests.fixtures.seaweed import SeaweedServer
from tests.integration.queue_support import new_record, video_artifact
from worker.sweeper import Sweeper

MIN_AGE_S = 600.0
AHEAD_S = 3600.0  # the sweeper's clock: every file written by the test is an hour old to it


@pytest.fixture(params=["local", "s3"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> ArtifactStore:
    if request.param == "local":
        return LocalStore(tmp_path / "artifacts", b"0123456789abcdef0123", "http://127.0.0.1:1", 60)
    seaweed: SeaweedServer = request.getfixturevalue("seaweed")
    # A bucket of its own: the sweeper judges every object under generations/, and the session's
    # bucket holds other tests' objects, which it would (rightly) take for orphans.
    store = S3Store(seaweed.store_settings(s3_bucket=f"sweeper-{uuid.uuid4().hex[:12]}"))
    store.ensure_bucket()
    return store


def _put(store: ArtifactStore, key: str, tmp_path: Path) -> str:
    source = tmp_path / "source.bin"
    source.write_bytes(os.urandom(64))
    store.put_file(key, source, content_type="application/octet-stream")
    return key


def _work_dir(root: Path, job_id: str, attempt: int) -> Path:
    return Path(tempfile.mkdtemp(prefix=f"{job_id}-{attempt}-", dir=root))  # as worker.runner does


def _claim(queue: SqliteQueue, model: str = "tiny-wan") -> Claim:
    claim = queue.claim("w1", [model])
    assert claim is not None
    return claim


def test_sweeper_removes_orphans_and_keeps_what_records_point_at(store: ArtifactStore, tmp_path: Path) -> None:
    queue = SqliteQueue(tmp_path / "queue.db")
    work = tmp_path / "work"
    work.mkdir()

    # A finished job: its listed video stays; a stale claim's object of it goes.
    done = queue.enqueue(new_record()).record
    claim = _claim(queue)
    listed = _put(store, artifact_key(done.id, 1, "aaaaaaaaaaaa", "video.mp4"), tmp_path)
    unlisted = _put(store, artifact_key(done.id, 1, "bbbbbbbbbbbb", "video.mp4"), tmp_path)
    assert queue.finish(claim, Outcome(status=Status.succeeded, artifacts=[video_artifact(listed, 64)]))
    done_dir = _work_dir(work, done.id, 1)

    # A job running at attempt 2 after its first holder was killed: attempt 1's files go, attempt 2's stay.
    running = queue.enqueue(new_record(model="tiny-ltx2")).record
    assert queue.release(_claim(queue, "tiny-ltx2"), reason="hung")  # attempt 1 used up
    _claim(queue, "tiny-ltx2")  # attempt 2, in flight
    stale = _put(store, artifact_key(running.id, 1, "cccccccccccc", "video.mp4"), tmp_path)
    in_flight = _put(store, artifact_key(running.id, 2, "dddddddddddd", "video.mp4"), tmp_path)
    killed_dir = _work_dir(work, running.id, 1)
    live_dir = _work_dir(work, running.id, 2)
    (live_dir / "video.mp4").write_bytes(b"encoding")

    # Objects and a work dir of a job with no record (expired, or never written).
    orphan = _put(store, artifact_key("gen_gone", 1, "eeeeeeeeeeee", "video.mp4"), tmp_path)
    orphan_dir = _work_dir(work, "gen_gone", 3)
    unrelated = work / "not-a-work-dir"  # not named as the runner names them: not ours to judge
    unrelated.mkdir()

    sweeper = Sweeper(queue, store, work, min_age_s=MIN_AGE_S, now=lambda: time.time() + AHEAD_S)
    report = sweeper.sweep()

    assert store.exists(listed) and store.exists(in_flight)
    assert not store.exists(unlisted) and not store.exists(stale) and not store.exists(orphan)
    assert live_dir.is_dir() and (live_dir / "video.mp4").exists() and unrelated.is_dir()
    assert not done_dir.exists() and not killed_dir.exists() and not orphan_dir.exists()
    assert report.objects == 3 and report.work_dirs == 3
    again = sweeper.sweep()
    assert (again.objects, again.work_dirs) == (0, 0) and store.exists(listed) and store.exists(in_flight)

    # Young files are never judged, whatever their record says.
    young = _put(store, artifact_key("gen_young", 1, "ffffffffffff", "video.mp4"), tmp_path)
    assert Sweeper(queue, store, work, min_age_s=MIN_AGE_S).sweep().objects == 0 and store.exists(young)
    queue.close()


def test_sweeper_removes_a_killed_copy_of_the_local_store(tmp_path: Path) -> None:
    """A worker killed mid-copy leaves ``.<name>.<random>.part`` beside the object it was writing."""
    store = LocalStore(tmp_path / "artifacts", b"0123456789abcdef0123", "http://127.0.0.1:1", 60)
    queue = SqliteQueue(tmp_path / "queue.db")
    record = queue.enqueue(new_record()).record
    claim = _claim(queue)
    part = store.path_for(artifact_key(record.id, 1, "aaaaaaaaaaaa", ".video.mp4.x1y2z3.part"))
    part.parent.mkdir(parents=True)
    part.write_bytes(b"half a video")
    sweeper = Sweeper(queue, store, tmp_path / "work", min_age_s=MIN_AGE_S, now=lambda: time.time() + AHEAD_S)
    assert sweeper.sweep().objects == 0 and part.exists()  # its attempt is running: maybe still copying
    assert queue.finish(claim, Outcome(status=Status.failed))
    assert sweeper.sweep().objects == 1 and not part.exists()
    assert not part.parent.exists()  # the emptied claim directory goes too
    queue.close()


def test_input_images_live_as_long_as_their_record(tmp_path: Path) -> None:
    """The API stores an input image before the job exists; it stays through every attempt and the
    terminal record, and goes once the record is gone (expired, or a create that never enqueued)."""
    store = LocalStore(tmp_path / "artifacts", b"0123456789abcdef0123", "http://127.0.0.1:1", 60)
    queue = SqliteQueue(tmp_path / "queue.db")
    running = queue.enqueue(new_record()).record
    assert queue.release(_claim(queue), reason="hung")
    _claim(queue)  # attempt 2: an input image is every attempt's
    done = queue.enqueue(new_record(model="tiny-ltx2")).record
    assert queue.finish(_claim(queue, "tiny-ltx2"), Outcome(status=Status.failed))
    kept = [_put(store, f"generations/{job.id}/input/image.png", tmp_path) for job in (running, done)]
    orphan = _put(store, "generations/gen_never_enqueued/input/image.png", tmp_path)
    sweeper = Sweeper(queue, store, tmp_path / "work", min_age_s=MIN_AGE_S, now=lambda: time.time() + AHEAD_S)
    assert sweeper.sweep().objects == 1
    assert all(store.exists(key) for key in kept) and not store.exists(orphan)
    queue.close()


def test_a_denoising_checkpoint_lives_while_its_generation_runs(tmp_path: Path) -> None:
    """A checkpoint (``generations/<id>/checkpoint/denoise.ckpt``) is any attempt's to resume from: kept while
    the record is queued or running, whatever its age; removed once the generation ended or is gone (what a
    worker killed before deleting it leaves behind)."""
    from worker.checkpoints import checkpoint_key

    store = LocalStore(tmp_path / "artifacts", b"0123456789abcdef0123", "http://127.0.0.1:1", 60)
    queue = SqliteQueue(tmp_path / "queue.db")
    running = queue.enqueue(new_record()).record
    assert queue.release(_claim(queue), reason="hung")  # back to queued at attempt 1: the checkpoint stays
    done = queue.enqueue(new_record(model="tiny-ltx2")).record
    assert queue.finish(_claim(queue, "tiny-ltx2"), Outcome(status=Status.succeeded))
    kept = _put(store, checkpoint_key(running.id), tmp_path)
    ended = _put(store, checkpoint_key(done.id), tmp_path)
    gone = _put(store, checkpoint_key("gen_expired"), tmp_path)
    sweeper = Sweeper(queue, store, tmp_path / "work", min_age_s=MIN_AGE_S, now=lambda: time.time() + AHEAD_S)
    assert sweeper.sweep().objects == 2
    assert store.exists(kept) and not store.exists(ended) and not store.exists(gone)
    queue.close()
