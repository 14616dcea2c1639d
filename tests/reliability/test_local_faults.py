"""Faults of one worker's own, next to a healthy worker on one real Redis: the job goes back to the
queue (no attempt used up), the faulty worker says why on ``/readyz`` and ``/metrics`` and stops
claiming, and the healthy worker runs every job.

- **broken model path**: a worker whose catalog points ``tiny-wan`` at weights that do not exist;
- **ffmpeg missing**: ``IMAGEIO_FFMPEG_EXE`` (the variable the encoder's imageio-ffmpeg reads) names
  a binary that does not exist;
- **full work disk**: the worker's work directory is a 2 MiB tmpfs filled to the last byte (the
  mount of ``test_disk_full``);
- **N distinct workers**: with ``model_load_failure_workers: 2`` and only broken workers, the job fails
  ``model_load_failed`` once two distinct workers gave it back; it does not go round for ever;
- **the only host is broken**: a lone worker whose model does not load fails no job: it backs off, the
  job waits queued, and ``GET /v1/models`` (a real API on the same Redis) reports the model unavailable.

Phases share the workers and run in file order (the only-host and N-workers phases first, before a
healthy worker exists). Releases by one kind of fault count toward the N-workers rule of a load failure (the events
log does not say why a job was released), so each faulty worker is stopped before the next starts.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from foundation.core.catalog import Catalog, load_catalog
from foundation.core.contract import GenerationRecord, Status
from foundation.core.errors import ErrorCode, public_message
from foundation.queue.base import JobQueue
from foundation.settings import settings_env
from tests.e2e.conftest import Stack, start_stack
from tests.fixtures.redis_server import start_redis
from tests.integration.worker_harness import (
    WorkerProcess,
    claimed_by,
    make_record,
    terminal,
    wait_for,
    wait_until,
    write_test_catalog,
)
from tests.reliability.support import worker_env
from tests.reliability.test_disk_full import fill, mount_tmpfs

pytestmark = pytest.mark.slow

MODEL = "tiny-wan"
SECRET = "local-faults-secret-0123456789"


class Site:
    """One Redis, one local store and one catalog; workers started on them by name."""

    def __init__(self, tmp: Path, redis_url: str, models_dir: Path) -> None:
        from foundation.queue.config import QueueSettings
        from foundation.queue.factory import open_queue

        self.tmp, self.redis_url, self.models_dir = tmp, redis_url, models_dir
        self.catalog_path = write_test_catalog(tmp / "catalog.yaml")
        self.catalog: Catalog = load_catalog(self.catalog_path)
        self.queue: JobQueue = open_queue(QueueSettings(backend="redis", redis_url=redis_url, lease_ttl_s=2))
        self.workers: dict[str, WorkerProcess] = {}

    def start(self, name: str, *, catalog: Path | None = None, preload: bool = True, **extra: str) -> WorkerProcess:
        tmp = self.tmp / name
        tmp.mkdir(exist_ok=True)
        settings = {
            "store": {"backend": "local", "local_root": str(self.tmp / "store"), "signing_secret": SECRET},
            "worker": {
                "worker_id": name,
                "preload": [MODEL] if preload else [],
                "fault_backoff_s": 1,
                "fault_backoff_max_s": 2,
                "model_load_failure_workers": 2,
            },
        }
        env = worker_env(tmp, self.redis_url, self.models_dir, catalog or self.catalog_path)
        env = {**env, **settings_env(settings), "OMP_NUM_THREADS": "1", **extra}
        worker = WorkerProcess(env, tmp / "worker.log").start()
        self.workers[name] = worker
        return worker.wait_ready()

    def stop(self, name: str) -> None:
        self.workers.pop(name).stop()

    def broken_catalog(self) -> Path:
        """The site's catalog with ``tiny-wan`` pointing at weights that are not there."""
        data = yaml.safe_load(self.catalog_path.read_text(encoding="utf-8"))
        for model in data["models"]:
            if model["id"] == MODEL:
                model.update(tiny=False, weights=str(self.tmp / "no-such-weights" / MODEL))
        path = self.tmp / "catalog-broken.yaml"
        path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
        return path

    def enqueue(self) -> GenerationRecord:
        record = make_record(self.catalog, MODEL, variant="fast", resolution="144p", duration_seconds=1)
        return self.queue.enqueue(record).record


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory, tiny_models_dir: Path) -> Iterator[Site]:
    tmp = tmp_path_factory.mktemp("local-faults")
    redis = start_redis(tmp / "redis")
    site = Site(tmp, redis.url, tiny_models_dir)
    try:
        yield site
    finally:
        for name in list(site.workers):
            site.stop(name)
        site.queue.close()
        redis.stop()


def readyz(worker: WorkerProcess) -> tuple[int, dict[str, Any]]:
    status, body = worker.get("/readyz")
    return status, json.loads(body or b"{}")


def released_by(queue: JobQueue, job_id: str) -> list[str]:
    """Workers whose claim of the job ended in a release, from the job's events."""
    holder, out = "", []
    for event in queue.events(job_id):
        if event.reason and event.reason.startswith("claimed by "):
            holder = event.reason.removeprefix("claimed by ")
        elif event.reason and event.reason.startswith("released"):
            out.append(holder)
    return out


def feed_until_fault(site: Site, faulty: WorkerProcess, kind: str) -> list[GenerationRecord]:
    """Enqueue pairs of jobs until ``faulty`` met its fault (both workers compete for each pair)."""
    jobs: list[GenerationRecord] = []
    for _ in range(5):
        jobs += [site.enqueue(), site.enqueue()]
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if any(f["kind"] == kind for f in readyz(faulty)[1].get("faults", [])):
                return jobs
            if all(site.queue.get(j.id).terminal for j in jobs):  # type: ignore[union-attr]
                break
            time.sleep(0.1)
    raise AssertionError(f"the faulty worker never met its {kind} fault:\n{faulty.log_tail()}")


def assert_all_succeeded_on(site: Site, jobs: list[GenerationRecord], good: str, faulty: str) -> None:
    wait_until(lambda: all(site.queue.get(j.id).terminal for j in jobs), "every job to end")  # type: ignore[union-attr]
    released = 0
    for job in jobs:
        done = site.queue.get(job.id)
        assert done is not None and done.status is Status.succeeded, (job.id, done and done.error)
        claims = claimed_by(site.queue, job.id)
        assert claims[-1] == good, claims
        reasons = {e.reason for e in site.queue.events(job.id)}
        assert not any(r and r.startswith(("retry", "failed")) for r in reasons), reasons  # no attempt used up
        released += released_by(site.queue, job.id).count(faulty)
    assert released >= 1, "no job was released by the faulty worker"


def assert_says_why(worker: WorkerProcess, kind: str, model: str | None, reason: str) -> None:
    status, body = readyz(worker)
    assert status == 503, body  # it hosts one model: a fault leaves it nothing to take
    fault = next(f for f in body["faults"] if f["kind"] == kind)
    assert fault["model"] == model and reason in fault["reason"], fault
    assert body["models_ready"] == []
    assert worker.metric("genworker_worker_fault", kind=kind, model=model or "") == 1
    assert worker.metric("genworker_local_faults_total", kind=kind, model=MODEL) >= 1
    assert worker.metric("genworker_model_ready", model=MODEL) == 0
    assert worker.get("/healthz")[0] == 200  # not a restart: the fault is the machine's, not the process's


def test_a_models_only_host_that_cannot_load_it_backs_off_and_its_jobs_wait(site: Site) -> None:
    api = start_stack(site.tmp / "api", redis_url=site.redis_url)
    try:
        worker = site.start("only-host", catalog=site.broken_catalog(), preload=False)
        wait_until(lambda: _available(api) is True, "the model offered while nothing failed yet", timeout_s=30)
        job = site.enqueue()

        def probed_thrice_or_ended() -> bool:  # probed again after each backoff (1 s, then 2 s)
            now = site.queue.get(job.id)
            return now is None or now.terminal or released_by(site.queue, job.id).count("only-host") >= 3

        wait_until(probed_thrice_or_ended, "three probes", timeout_s=60)
        record = site.queue.get(job.id)
        assert record is not None and record.status is Status.queued and record.error is None, record
        reasons = [e.reason or "" for e in site.queue.events(job.id)]
        assert not any(r.startswith(("retry", "failed")) for r in reasons), reasons
        assert worker.metric("genworker_jobs_total", status="failed") == 0
        # Its heartbeat offers the model no more, so the API says the model is unavailable.
        wait_until(lambda: _available(api) is False, "the model reported unavailable", timeout_s=30)
        beat = next(b for b in site.queue.live_workers() if b.worker_id == "only-host")
        assert (beat.hosted_models, beat.faulted_models) == ([], [MODEL]), beat
        site.queue.cancel(job.id)  # the phases after this one start with no job waiting
    finally:
        api.stop()
        if "only-host" in site.workers:
            site.stop("only-host")


def _available(api: Stack) -> bool:
    with api.client() as c:
        models = c.get("/v1/models").json()["data"]
    return bool(next(m for m in models if m["id"] == MODEL)["available"])


def test_a_model_that_loads_on_no_worker_fails_after_n_distinct_workers(site: Site) -> None:
    broken = site.broken_catalog()
    site.start("broken-1", catalog=broken, preload=False)
    site.start("broken-2", catalog=broken, preload=False)
    job = site.enqueue()
    done, _ = wait_for(site.queue, job.id, terminal, timeout_s=120)
    assert done.status is Status.failed and done.error is not None, done
    assert done.error.code is ErrorCode.model_load_failed, done.error
    assert done.error.message == public_message(ErrorCode.model_load_failed), done.error.message
    why = "failed to load on 2 workers"  # logged by the worker that failed it (lines land just after)
    logged = " | ".join(w.job_log(job.id, until=why, timeout_s=5) for w in site.workers.values())
    assert why in logged, logged
    assert set(released_by(site.queue, job.id)) == {"broken-1", "broken-2"} - {_last_claimer(site, job.id)}
    site.stop("broken-2")


def _last_claimer(site: Site, job_id: str) -> str:
    return claimed_by(site.queue, job_id)[-1]


def test_a_worker_with_a_broken_model_path_leaves_every_job_to_a_good_one(site: Site) -> None:
    site.start("good")
    faulty = site.workers["broken-1"]
    jobs = feed_until_fault(site, faulty, "model_load")
    assert_says_why(faulty, "model_load", MODEL, "does not exist")
    assert_all_succeeded_on(site, jobs, "good", "broken-1")
    site.stop("broken-1")


def test_missing_ffmpeg_releases_the_job_instead_of_failing_it(site: Site) -> None:
    faulty = site.start("no-ffmpeg", IMAGEIO_FFMPEG_EXE=str(site.tmp / "no-such-ffmpeg"))
    jobs = feed_until_fault(site, faulty, "encoder")
    assert_says_why(faulty, "encoder", None, "no-such-ffmpeg")
    assert_all_succeeded_on(site, jobs, "good", "no-ffmpeg")
    assert faulty.metric("genworker_jobs_total", status="failed") == 0
    site.stop("no-ffmpeg")


def test_a_full_work_disk_releases_the_job_instead_of_failing_it(site: Site) -> None:
    work = site.tmp / "full-disk" / "data" / "work"
    mount_tmpfs(work)
    try:
        # The disk fills while the worker runs (worker.min_free_disk_mb off: its 2 MiB would stop every claim
        # before one starts, tests/integration/test_worker_start.py): the encode meets ENOSPC mid-job.
        faulty = site.start("full-disk", GENWORKER_WORKER__MIN_FREE_DISK_MB="0")
        filler = fill(work, leave=0)
        jobs = feed_until_fault(site, faulty, "disk")
        assert_says_why(faulty, "disk", None, "No space left on device")
        assert_all_succeeded_on(site, jobs, "good", "full-disk")
        assert faulty.metric("genworker_jobs_total", status="failed") == 0
        assert [p for p in work.iterdir() if p != filler] == [], "work dirs left behind"
        site.stop("full-disk")
    finally:
        subprocess.run(["umount", str(work)], check=False)
