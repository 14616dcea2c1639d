"""A fleet on one Redis: three real ``genworker worker`` processes hosting different model sets, 100
tiny jobs, and ``GET /v1/models`` (the real app, in-process, over the same Redis) following the fleet.

- worker ``fleet-wan`` hosts {tiny-wan}, ``fleet-ltx`` {tiny-ltx2}, ``fleet-both`` {tiny-wan, tiny-ltx2};
- which worker ran a job comes from the job's own events (``claimed by <worker id>``, written by the
  claim in the same atomic step that starts the attempt), cross-checked with each worker's
  ``genworker_jobs_total`` on ``/metrics``.

Jobs use the ``fast`` variant at 144p for 1 s (two denoising steps on CPU) so 100 of them fit in
about a minute on two cores. Nothing here asserts on time; waits poll with generous deadlines.
"""

from __future__ import annotations

import base64
import os
import signal
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from foundation.core.catalog import Catalog, load_catalog
from foundation.core.contract import GenerationRecord, Status
from foundation.queue.base import JobQueue
from foundation.queue.config import QueueSettings
from foundation.queue.factory import open_queue
from foundation.settings import Settings, settings_env
from foundation.stores.config import StoreSettings
from tests.integration.worker_harness import WorkerProcess, claimed_by, make_record, wait_until, write_test_catalog

FLEET = {
    "fleet-wan": ["tiny-wan"],
    "fleet-ltx": ["tiny-ltx2"],
    "fleet-both": ["tiny-wan", "tiny-ltx2"],
}
JOBS_PER_MODEL = 50
HEARTBEAT_S = 1.0  # heartbeats live 3 beats: a stopped worker leaves /v1/models within ~3 s
WAIT_S = 300.0


class Fleet:
    """The shared Redis, store and catalog, and the worker processes started on them."""

    def __init__(self, tmp: Path, redis_url: str, tiny_models_dir: Path) -> None:
        self.tmp = tmp
        self.redis_url = redis_url
        self.tiny_models_dir = tiny_models_dir
        self.catalog_path = write_test_catalog(tmp / "catalog.yaml")
        self.catalog: Catalog = load_catalog(self.catalog_path)
        self.artifacts = tmp / "artifacts"
        self.queue: JobQueue = open_queue(QueueSettings(backend="redis", redis_url=redis_url))
        self.workers: dict[str, WorkerProcess] = {}

    def start(self, worker_id: str, models: list[str]) -> WorkerProcess:
        settings = {
            "data_dir": str(self.tmp / worker_id),
            "catalog_path": str(self.catalog_path),
            "queue": {"backend": "redis", "redis_url": self.redis_url},
            "store": {"backend": "local", "local_root": str(self.artifacts)},
            "models": {"tiny_models_dir": str(self.tiny_models_dir)},
            "worker": {
                "worker_id": worker_id,
                "hosted_models": models,
                "preload": models,
                "heartbeat_s": HEARTBEAT_S,
                "build_tiny_models": False,
            },
        }
        # Two cores, three workers: one torch thread each keeps them from fighting over cores.
        env = {**settings_env(settings), "OMP_NUM_THREADS": "1"}
        worker = WorkerProcess(env, self.tmp / f"{worker_id}.log").start()
        self.workers[worker_id] = worker
        return worker

    def enqueue(self, model: str) -> GenerationRecord:
        record = make_record(self.catalog, model, variant="fast", resolution="144p", duration_seconds=1)
        return self.queue.enqueue(record).record

    def api(self) -> TestClient:
        """The real API app over the fleet's Redis (what `genworker api` serves)."""
        from api.server import build_app

        settings = Settings(
            data_dir=str(self.tmp / "api"),
            catalog_path=str(self.catalog_path),
            queue=QueueSettings(backend="redis", redis_url=self.redis_url),
            store=StoreSettings(backend="local", local_root=str(self.artifacts)),
            webhooks={"secret_key": base64.urlsafe_b64encode(os.urandom(32)).decode("ascii")},  # required on Redis
        )
        return TestClient(build_app(settings))

    def stop_all(self) -> None:
        for worker in self.workers.values():
            worker.stop()
        self.queue.close()


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory, redis_server: Any, tiny_models_dir: Path) -> Iterator[Fleet]:
    client = redis_server.client()
    client.flushall()
    client.close()
    fleet = Fleet(tmp_path_factory.mktemp("fleet"), redis_server.url, tiny_models_dir)
    try:
        for worker_id, models in FLEET.items():
            fleet.start(worker_id, models)
        for worker in fleet.workers.values():
            worker.wait_ready()
        yield fleet
    finally:
        fleet.stop_all()


def test_each_of_100_jobs_runs_once_on_a_worker_that_hosts_its_model(fleet: Fleet) -> None:
    queue = fleet.queue
    jobs = [fleet.enqueue(model) for _ in range(JOBS_PER_MODEL) for model in ("tiny-wan", "tiny-ltx2")]
    ids = [r.id for r in jobs]
    wait_until(lambda: all(queue.get(i).terminal for i in ids), "100 jobs to finish", WAIT_S)  # type: ignore[union-attr]

    ran_on: dict[str, Counter[str]] = {"tiny-wan": Counter(), "tiny-ltx2": Counter()}
    for record in jobs:
        done = queue.get(record.id)
        assert done is not None and done.status is Status.succeeded, (record.id, done and done.error)
        assert done.attempt == 1
        workers = claimed_by(queue, record.id)
        assert len(workers) == 1, (record.id, workers)  # claimed exactly once
        assert record.model in FLEET[workers[0]], (record.model, workers[0])  # only by a host of its model
        assert [e.status for e in queue.events(record.id)] == [Status.queued, Status.running, Status.succeeded]
        video = next(a for a in done.artifacts if a.kind == "video")
        assert (fleet.artifacts / video.key).stat().st_size == video.bytes
        ran_on[record.model][workers[0]] += 1

    # Load spreads: every worker ran some jobs. Which model fleet-both helps with is not fixed: it takes
    # the model whose oldest waiting job is older (foundation/queue/ordering.py), and that depends on how
    # fast the single-model workers drain their own queues.
    assert set(ran_on["tiny-wan"]) | set(ran_on["tiny-ltx2"]) == set(FLEET), ran_on
    assert "fleet-wan" in ran_on["tiny-wan"] and "fleet-ltx" in ran_on["tiny-ltx2"], ran_on
    # Each worker's own count of succeeded jobs per model agrees with what the events say it ran.
    for worker_id, worker in fleet.workers.items():
        for model in FLEET[worker_id]:
            counted = worker.metric("genworker_jobs_total", model=model, status="succeeded")
            assert counted == ran_on[model][worker_id], (worker_id, model)
    assert queue.depth("tiny-wan") == 0 and queue.depth("tiny-ltx2") == 0


def _models(api: TestClient) -> dict[str, dict[str, Any]]:
    response = api.get("/v1/models")
    assert response.status_code == 200, response.text
    return {m["id"]: m for m in response.json()["data"]}


def test_models_follow_the_fleet_as_workers_stop_and_start(fleet: Fleet) -> None:
    api = fleet.api()
    models = _models(api)
    assert models["tiny-wan"]["available"] and models["tiny-ltx2"]["available"]
    assert not models["slow-wan"]["available"]  # in the catalog, hosted by nobody

    # fleet-both stops: each model still has a worker.
    fleet.workers["fleet-both"].signal(signal.SIGTERM)
    assert fleet.workers["fleet-both"].wait_exit() == 0
    wait_until(
        lambda: {w.worker_id for w in fleet.queue.live_workers()} == {"fleet-wan", "fleet-ltx"}, "heartbeat", WAIT_S
    )
    models = _models(api)
    assert models["tiny-wan"]["available"] and models["tiny-ltx2"]["available"]

    # The last tiny-ltx2 worker stops: the model turns unavailable and its jobs wait, counted.
    fleet.workers["fleet-ltx"].signal(signal.SIGTERM)
    assert fleet.workers["fleet-ltx"].wait_exit() == 0
    wait_until(lambda: not _models(api)["tiny-ltx2"]["available"], "tiny-ltx2 to turn unavailable", WAIT_S)
    waiting = [fleet.enqueue("tiny-ltx2") for _ in range(3)]
    # The catalog's body is up to a second old (api/routes/models.py): the waiting jobs show within it.
    wait_until(lambda: _models(api)["tiny-ltx2"]["queue_depth"] == 3, "the waiting jobs to show", WAIT_S)
    models = _models(api)
    assert models["tiny-wan"]["available"] and models["tiny-wan"]["queue_depth"] == 0
    assert not models["tiny-ltx2"]["available"]

    # A new tiny-ltx2 worker starts: available again, and it drains the waiting jobs.
    fleet.start("fleet-ltx-2", ["tiny-ltx2"]).wait_ready()
    wait_until(lambda: _models(api)["tiny-ltx2"]["available"], "tiny-ltx2 to turn available again", WAIT_S)
    wait_until(lambda: all(fleet.queue.get(r.id).terminal for r in waiting), "waiting jobs", WAIT_S)  # type: ignore[union-attr]
    assert all(claimed_by(fleet.queue, r.id) == ["fleet-ltx-2"] for r in waiting)
    wait_until(lambda: _models(api)["tiny-ltx2"]["queue_depth"] == 0, "the drained queue to show", WAIT_S)
