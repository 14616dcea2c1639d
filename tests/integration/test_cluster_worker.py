"""The worker's happy path on the 3-master Redis Cluster: a real ``genworker worker`` process configured
only through ``GENWORKER_QUEUE__REDIS_MODE=cluster`` and a seed node's URL, real SeaweedFS, ffmpeg and
tiny models. Jobs of two models (two hash slots) run to playable MP4s; their keys sit on the masters
that own their slots.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from redis.crc import key_slot

from foundation.core.catalog import load_catalog
from foundation.core.contract import Stage, Status
from foundation.queue import keys
from foundation.queue.config import QueueSettings
from foundation.queue.factory import open_queue
from foundation.settings import settings_env
from foundation.stores.factory import open_store
from tests.fixtures.redis_cluster import LocalCluster
from tests.integration.worker_harness import WorkerProcess, make_record, seaweed_env, terminal, wait_for
from tests.integration.worker_media import assert_playable_mp4, fetch_object

MODELS = ["tiny-wan", "tiny-ltx2"]


@pytest.fixture(scope="module")
def stack(
    tmp_path_factory: pytest.TempPathFactory, redis_cluster: LocalCluster, seaweed: Any, tiny_models_dir: Path
) -> Iterator[dict[str, Any]]:
    redis_cluster.flushall()
    tmp = tmp_path_factory.mktemp("cluster-worker")
    settings = {
        "data_dir": str(tmp / "data"),
        "queue": {
            "backend": "redis",
            "redis_mode": "cluster",
            "redis_url": redis_cluster.url,
            "cluster_nodes": redis_cluster.addresses[1:],
        },
        "models": {"tiny_models_dir": str(tiny_models_dir)},
        "worker": {"hosted_models": MODELS, "preload": MODELS, "heartbeat_s": 1, "build_tiny_models": False},
    }
    env = {**settings_env(settings), **seaweed_env(seaweed)}
    worker = WorkerProcess(env, tmp / "worker.log").start()
    queue = open_queue(QueueSettings(backend="redis", redis_mode="cluster", redis_url=redis_cluster.url))
    try:
        worker.wait_ready()
        yield {
            "worker": worker,
            "queue": queue,
            "store": open_store(seaweed.store_settings(), data_dir=tmp),
            "catalog": load_catalog(None),
        }
    finally:
        worker.stop()
        queue.close()


def test_jobs_of_two_slots_run_to_playable_mp4s(stack: dict[str, Any]) -> None:
    queue = stack["queue"]
    ltx = make_record(stack["catalog"], "tiny-ltx2", resolution="144p", ratio="16:9", duration_seconds=2, audio=True)
    wan = make_record(stack["catalog"], "tiny-wan", variant="fast", resolution="144p", duration_seconds=1)
    for record in (ltx, wan):
        queue.enqueue(record)

    done, _ = wait_for(queue, ltx.id, terminal)
    assert done.status is Status.succeeded, done.error
    assert done.stage is Stage.done and done.progress == 1.0 and done.attempt == 1
    assert [e.status for e in queue.events(ltx.id)] == [Status.queued, Status.running, Status.succeeded]
    video = next(a for a in done.artifacts if a.kind == "video")
    assert re.fullmatch(rf"generations/{ltx.id}/1-[0-9a-f]{{12}}/video\.mp4", video.key), video.key
    assert_playable_mp4(
        fetch_object(stack["store"], video.key), width=256, height=144, frames=16, duration_s=2.0, audio_channels=2
    )

    done_wan, _ = wait_for(queue, wan.id, terminal)
    assert done_wan.status is Status.succeeded, done_wan.error
    wan_video = next(a for a in done_wan.artifacts if a.kind == "video")
    assert_playable_mp4(
        fetch_object(stack["store"], wan_video.key),
        width=256,
        height=144,
        frames=4,
        duration_s=1.0,
        audio_channels=None,
    )


def test_the_worker_heartbeat_and_depth_are_read_across_slots(stack: dict[str, Any]) -> None:
    queue = stack["queue"]
    beats = queue.live_workers()
    assert len(beats) == 1 and sorted(beats[0].hosted_models) == sorted(MODELS)
    assert all(queue.depth(m) == 0 for m in MODELS)
    # The two pools really are in different slots, so the worker above crossed slots job by job.
    assert key_slot(keys.job_stream("tiny-wan").encode()) != key_slot(keys.job_stream("tiny-ltx2").encode())
