"""Artifact keys are unique per claim: two holders of one attempt number never touch each other's objects.

A Redis failover that loses a claim's start lets the job be claimed again at the same attempt number,
with the same stream entry (and, for the same worker, the same token). The test reproduces that on a
real redis-server by restoring the job's keys to their state before the first claim (``DUMP`` /
``RESTORE``, what a replica that missed the write holds), then uploads both holders' files to the real
local store and to real S3 (SeaweedFS) through the worker's own upload and discard functions.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
import redis

from foundation.core.contract import Artifact, Status
from foundation.queue import keys
from foundation.queue.base import Claim, Outcome
from foundation.queue.redis.backend import RedisQueue
from foundation.stores.base import ArtifactStore, artifact_key, claim_tag
from foundation.stores.local import LocalStore
from foundation.stores.s3 import S3Store
from tests.fixtures.seaweed import SeaweedServer
from tests.integration.queue_support import new_record
from worker.postprocess import discard_objects, upload_artifacts


@pytest.fixture(params=["local", "s3"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> ArtifactStore:
    if request.param == "local":
        return LocalStore(tmp_path / "artifacts", b"0123456789abcdef0123", "http://127.0.0.1:1", 60)
    seaweed: SeaweedServer = request.getfixturevalue("seaweed")
    return S3Store(seaweed.store_settings())


@pytest.fixture
def queue(redis_url: str) -> Iterator[RedisQueue]:
    q = RedisQueue(redis_url, lease_ttl_s=30)
    yield q
    q.close()


def claim_twice(queue: RedisQueue, redis_url: str, first: str, second: str) -> tuple[Claim, Claim]:
    """Two claims of attempt 1 of one job: ``first`` claims, a "failover" loses that claim's writes
    (the job's keys go back to their state before it), then ``second`` claims."""
    record = new_record()
    assert queue.claim("warm-up", [record.model], block_s=0) is None  # the group exists before the snapshot
    queue.enqueue(record)
    job_keys = [
        keys.job_record(record.model, record.id),
        keys.job_stream(record.model),
        keys.running_set(record.model),
    ]
    raw = redis.Redis.from_url(redis_url)  # bytes: DUMP payloads are not text
    try:
        before = {k: raw.dump(k) for k in job_keys}
        a = queue.claim(first, [record.model], block_s=1)
        for k, payload in before.items():
            if payload is None:
                raw.delete(k)
            else:
                raw.restore(k, 0, payload, replace=True)
        b = queue.claim(second, [record.model], block_s=1)
    finally:
        raw.close()
    assert a is not None and b is not None
    assert (a.job_id, a.attempt) == (b.job_id, b.attempt) == (record.id, 1)
    return a, b


def files_of(directory: Path, label: str) -> list[tuple[Artifact, Path]]:
    directory.mkdir(parents=True, exist_ok=True)
    out: list[tuple[Artifact, Path]] = []
    for kind, name, ctype in (("video", "video.mp4", "video/mp4"), ("poster", "poster.jpg", "image/jpeg")):
        data = f"{label}:{name}".encode() * 50
        path = directory / name
        path.write_bytes(data)
        sha = hashlib.sha256(data).hexdigest()
        meta = Artifact(kind=kind, key="", content_type=ctype, bytes=len(data), sha256=sha, width=256, height=144)
        out.append((meta, path))
    return out


def success(artifacts: list[Artifact]) -> Outcome:
    return Outcome(status=Status.succeeded, artifacts=artifacts)


def test_artifact_key_shape_and_claim_tag() -> None:
    at = datetime(2025, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)
    tag = claim_tag("1700000000000-0|w1", at)
    assert re.fullmatch(r"[0-9a-f]{12}", tag)
    assert claim_tag("1700000000000-0|w1", at) == tag  # stable for one claim
    assert claim_tag("1700000000000-0|w2", at) != tag
    assert claim_tag("1700000000000-0|w1", at.replace(microsecond=678902)) != tag
    assert artifact_key("gen_1", 2, tag, "video.mp4") == f"generations/gen_1/2-{tag}/video.mp4"


@pytest.mark.parametrize("second", ["worker-a", "worker-b"], ids=["same-worker-same-token", "other-worker"])
def test_two_holders_of_one_attempt_never_touch_each_others_objects(
    queue: RedisQueue, redis_url: str, store: ArtifactStore, tmp_path: Path, second: str
) -> None:
    a, b = claim_twice(queue, redis_url, "worker-a", second)
    assert (a.token == b.token) is (second == "worker-a")
    stored_a = upload_artifacts(store, a, files_of(tmp_path / "a", "A"))
    stored_b = upload_artifacts(store, b, files_of(tmp_path / "b", "B"))
    keys_a, keys_b = {x.key for x in stored_a}, {x.key for x in stored_b}
    assert not keys_a & keys_b
    assert all(store.exists(k) for k in keys_a | keys_b)  # b's upload did not overwrite a's

    # The winner finishes first; the loser's finish is refused and it discards only its own objects.
    assert queue.finish(b, success(stored_b))
    assert not queue.finish(a, success(stored_a))
    discard_objects(store, stored_a)
    assert not any(store.exists(k) for k in keys_a)
    assert all(store.exists(k) for k in keys_b)
    done = queue.get(b.job_id)
    assert done is not None and done.status is Status.succeeded
    assert {x.key for x in done.artifacts} == keys_b


def test_a_failed_upload_removes_only_the_objects_it_stored(
    queue: RedisQueue, redis_url: str, store: ArtifactStore, tmp_path: Path
) -> None:
    a, b = claim_twice(queue, redis_url, "worker-a", "worker-b")
    stored_b = upload_artifacts(store, b, files_of(tmp_path / "b", "B"))
    files = files_of(tmp_path / "a", "A")
    files[1][1].unlink()  # the poster vanished from the work dir: the second put fails
    with pytest.raises(Exception):  # noqa: B017 - whatever the store raises for a missing file
        upload_artifacts(store, a, files)
    tag = claim_tag(a.token, a.record.updated_at)
    assert not store.exists(artifact_key(a.job_id, a.attempt, tag, "video.mp4"))
    assert all(store.exists(x.key) for x in stored_b)
