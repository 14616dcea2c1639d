"""Scale benchmark: jobs/s with 4, 2 and 1 ``genworker worker`` processes on one Redis queue (tiny
``fast`` jobs, 144p, 1 s; the same batch each time), and pick-up latency under a 10,000-job backlog.

- **scale**: four workers start once (tiny-wan preloaded); the batch runs on 4, then two are stopped
  (SIGTERM) and it runs on 2, then on 1. jobs/s = batch ÷ (enqueue of the first job → last finish).
- **backlog**: with one idle worker, pick-up latency (enqueue → ``running``) of tiny-wan jobs with an
  empty queue, then with 10,000 jobs of a model no worker hosts queued; and the queue's own claim→finish
  round trip on one model at depth 10,000 vs depth 0 (``foundation.queue`` directly, no worker).

Run: ``python scripts/bench_scale.py [--quick]`` (prints JSON), or as a section of ``make bench``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from foundation.core.catalog import Catalog, load_catalog  # noqa: E402
from foundation.core.contract import GenerationRecord, Money, RecordInput, RecordParameters, Status  # noqa: E402
from foundation.queue.base import JobQueue, Outcome  # noqa: E402
from foundation.settings import settings_env  # noqa: E402
from scripts.bench_worker import queue_job  # noqa: E402
from tests.fixtures.redis_server import start_redis  # noqa: E402
from tests.integration.worker_harness import WorkerProcess, make_record, terminal, wait_for  # noqa: E402

JOB: dict[str, Any] = {"model": "tiny-wan", "variant": "fast", "resolution": "144p", "duration_seconds": 1}
BACKLOG = 10_000
LOADS_METRIC = "genworker_model_load_seconds_count"
BACKLOG_MODEL = "tiny-ltx2"  # in the catalog, but hosted by no worker of this benchmark
WORKER_COUNTS = (4, 2, 1)


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def _job(catalog: Catalog) -> GenerationRecord:
    params = {k: v for k, v in JOB.items() if k not in ("model", "variant")}
    return make_record(catalog, JOB["model"], variant=JOB["variant"], **params)


def _bare_record(model: str) -> GenerationRecord:
    """A queued record without resolving it against the catalog (fast to build 10,000 of)."""
    return GenerationRecord(
        id=f"gen_{uuid.uuid4().hex}",
        project="bench",
        model=model,
        mode="text_to_video",
        variant="standard",
        parameters=RecordParameters(resolution="144p", duration_seconds=1, ratio="16:9"),
        input=RecordInput(prompt="a lighthouse in a storm"),
        price_hold=Money(amount="0.01"),
    )


def _worker_env(base: Path, name: str, redis_url: str, models_dir: Path) -> dict[str, str]:
    settings = {
        "data_dir": str(base / name),
        "queue": {"backend": "redis", "redis_url": redis_url},
        "store": {"backend": "local", "local_root": str(base / "artifacts")},
        "models": {"tiny_models_dir": str(models_dir)},
        "worker": {"hosted_models": ["tiny-wan"], "preload": ["tiny-wan"]},
        "log_level": "WARNING",
    }
    return settings_env(settings)


def _batch(queue: JobQueue, catalog: Catalog, n: int) -> dict[str, float]:
    records = [_job(catalog) for _ in range(n)]
    started = time.time()
    for record in records:
        queue.enqueue(record)
    done = [wait_for(queue, r.id, terminal, timeout_s=600)[0] for r in records]
    assert all(d.status == Status.succeeded for d in done), [d.error for d in done]
    span = max(d.finished_at.timestamp() for d in done if d.finished_at) - started
    return {"jobs": n, "span_s": round(span, 3), "jobs_per_s": round(n / span, 3)}


def _pickups(queue: JobQueue, catalog: Catalog, n: int) -> list[float]:
    shape = {**JOB}
    return [round(queue_job(queue, catalog, shape, seed=i)[1], 3) for i in range(n)]


def _claim_round_trips(queue: JobQueue, model: str, n: int) -> list[float]:
    """claim→finish of ``n`` jobs of ``model`` (enqueued just before, behind whatever is queued), in ms."""
    for _ in range(n):
        queue.enqueue(_bare_record(model))
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        claim = queue.claim("bench-claimer", [model])
        assert claim is not None
        assert queue.finish(claim, Outcome(status=Status.succeeded))
        out.append(round((time.perf_counter() - t0) * 1000, 3))
    return out


def _fill(queue: JobQueue, model: str, n: int) -> float:
    started = time.perf_counter()
    for _ in range(n):
        queue.enqueue(_bare_record(model))
    return time.perf_counter() - started


def run(quick: bool = False) -> dict[str, Any]:
    from foundation.queue.config import QueueSettings
    from foundation.queue.factory import open_queue
    from pipelines.tiny.builders import build_all

    batch, samples = (8, 5) if quick else (24, 25)
    phases: dict[str, float] = {}
    mark = time.perf_counter()

    def phase(name: str) -> None:
        nonlocal mark
        now = time.perf_counter()
        phases[name] = round(now - mark, 1)
        mark = now

    base = Path(tempfile.mkdtemp(prefix="bench-scale-"))
    models_dir = Path(os.environ.get("GENWORKER_MODELS__TINY_MODELS_DIR", ROOT / "var" / "models"))
    build_all(models_dir)
    catalog = load_catalog()
    redis = start_redis(base / "redis")
    queue = open_queue(QueueSettings(backend="redis", redis_url=redis.url))
    workers = [
        WorkerProcess(_worker_env(base, f"w{i}", redis.url, models_dir), base / f"w{i}.log")
        for i in range(max(WORKER_COUNTS))
    ]
    result: dict[str, Any] = {"job": JOB, "batch": batch, "queue": "redis", "cores": os.cpu_count()}
    try:
        for w in workers:
            w.start()
        for w in workers:
            w.wait_ready()
        phase("start_workers")
        loads_at_ready = [w.metric(LOADS_METRIC) for w in workers]
        loads_paid = 0.0
        _batch(queue, catalog, len(workers))  # warm torch up in the workers
        phase("warm_up")
        scale: dict[str, dict[str, float]] = {}
        for count in WORKER_COUNTS:
            for i, w in enumerate(workers[count:], start=count):
                if w.proc is not None and w.proc.poll() is None:
                    loads_paid += w.metric(LOADS_METRIC) - loads_at_ready[i]
                    w.stop()
            scale[str(count)] = _batch(queue, catalog, batch)
            phase(f"batch_on_{count}")
        one = scale["1"]["jobs_per_s"]
        for row in scale.values():
            row["speedup_vs_1"] = round(row["jobs_per_s"] / one, 3)
        result["workers"] = scale
        idle = _pickups(queue, catalog, samples)
        claim_empty = _claim_round_trips(queue, BACKLOG_MODEL, samples * 4)
        phase("idle_pickups")
        fill_s = _fill(queue, BACKLOG_MODEL, BACKLOG)  # hosted by no worker here: it stays queued
        phase("fill_backlog")
        loaded = _pickups(queue, catalog, samples)
        claim_deep = _claim_round_trips(queue, BACKLOG_MODEL, samples * 4)
        phase("backlog_pickups")
        loads_paid += workers[0].metric(LOADS_METRIC) - loads_at_ready[0]
    finally:
        for w in workers:
            w.stop()
        queue.close()
        redis.stop()
        shutil.rmtree(base, ignore_errors=True)
    result["backlog"] = {
        "depth": BACKLOG,
        "enqueue_per_s": round(BACKLOG / fill_s, 1),
        "pickup_idle_p50_ms": _pct(idle, 0.5),
        "pickup_idle_p99_ms": _pct(idle, 0.99),
        "pickup_backlog_p50_ms": _pct(loaded, 0.5),
        "pickup_backlog_p99_ms": _pct(loaded, 0.99),
        "pickup_ratio_backlog_vs_idle": round(statistics.median(loaded) / statistics.median(idle), 3),
        "claim_depth0_p50_ms": _pct(claim_empty, 0.5),
        "claim_depth10k_p50_ms": _pct(claim_deep, 0.5),
        "claim_ratio_depth10k_vs_0": round(statistics.median(claim_deep) / statistics.median(claim_empty), 3),
    }
    result["jobs_that_paid_a_load_after_preload"] = int(loads_paid)
    result["wall_by_phase_s"] = phases
    result["pickup_idle_samples_ms"] = idle
    result["pickup_backlog_samples_ms"] = loaded
    result["claim_depth0_samples_ms"] = claim_empty
    result["claim_depth10k_samples_ms"] = claim_deep
    result["notes"] = (
        f"This machine has {os.cpu_count()} cores and every worker process competes for them: a tiny job is "
        "CPU work (torch denoising, VAE decode, ffmpeg encode). One worker leaves cores idle part of the time "
        "(single-threaded Python stretches, queue round trips, ffmpeg start-up, tiny tensors that torch does "
        "not spread over cores), so a second worker adds nearly its share; past the core count more processes "
        "only time-share the same cores, so jobs/s flattens at about the 2-worker figure (the 2-core "
        "ceiling). On GPU nodes one worker drives one GPU: the fleet scales with GPUs, not processes per "
        "node. Backlog: the 10,000 queued jobs are of a model no worker hosts (pick-up of hosted work must "
        "not notice them); the claim figures (no worker: foundation.queue directly) claim that model's jobs "
        "with 10,000 of them queued vs with its stream empty."
    )
    return result


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    print(json.dumps(run(quick=parser.parse_args().quick), indent=2))
