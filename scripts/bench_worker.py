"""Worker benchmark: what the daemon adds on top of the work itself, on the tiny CPU models.

- **overhead** = median end-to-end job time through the queue (enqueue → succeeded, one job at a
  time, an idle warm worker on Redis) ÷ median time of the same resolve → generate → encode → upload
  called directly in one process (warm model, same local store). Target ≤ 1.05.
- **pick-up latency** = enqueue → ``started_at`` (claimed, ``running``) with an idle worker.
- **throughput** with post-processing overlapped (encode+upload of job N while job N+1 denoises) and
  without, on a batch enqueued at once; the job shape is picked so encoding is comparable to denoising.
- **model loads**: cold load vs warm (cached) get, and how many jobs of a mixed two-model batch paid a
  load (warm-model affinity: a worker prefers queued jobs of the model it has loaded).
- **daemon pick-up** = the ``enqueue`` call → the adapter's ``denoise`` called, in an idle worker of the
  test-only ``instant-wan`` model (no model work: what the daemon itself costs before the model runs),
  hosting that model alone and with a second hosted model (the multi-stream claim path); split at the
  claim's ``started_at`` (stamped by ``claim.lua`` on the server as it starts the job) into enqueue →
  claim (the producer's create, the wake-up and the claim) and claim → adapter (the claim's reply to
  the worker, then the daemon's own work); on an idle machine and with every core kept from idling
  (``bench_load``: waking a halted core is this VM's largest cost, measured apart). After each job, one
  pick-up of bare Streams on the same server (``bench_queue.raw_streams_lane``): the host's wake-up
  cost at that moment, the floor the daemon's figure is read against (it drifts 2-3x within minutes).

Run: ``python scripts/bench_worker.py [--quick]`` (prints JSON), or as a section of ``make bench``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from foundation.core.catalog import Catalog, load_catalog  # noqa: E402
from foundation.core.contract import GenerationRecord  # noqa: E402
from foundation.queue.base import JobQueue  # noqa: E402
from foundation.settings import settings_env  # noqa: E402
from scripts.bench_load import busy_cores  # noqa: E402
from scripts.bench_queue import Consumers, raw_streams_lane  # noqa: E402
from tests.fixtures.redis_server import start_redis  # noqa: E402
from tests.integration.worker_harness import WorkerProcess, make_record, terminal, wait_for  # noqa: E402

# One job shape for overhead/latency, one where encoding weighs about as much as denoising.
LATENCY_JOB: dict[str, Any] = {"model": "tiny-wan", "variant": "standard", "resolution": "144p", "duration_seconds": 2}
# Tiny LTX-2 with audio: on CPU its encode (video + AAC) takes about as long as its denoising.
THROUGHPUT_JOB: dict[str, Any] = {
    "model": "tiny-ltx2",
    "variant": "standard",
    "resolution": "144p",
    "duration_seconds": 2,
}


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def _record(catalog: Catalog, shape: dict[str, Any], seed: int) -> GenerationRecord:
    params = {k: v for k, v in shape.items() if k not in ("model", "variant")}
    return make_record(catalog, shape["model"], variant=shape["variant"], seed=seed, **params)


class DirectPath:
    """The same work as a worker job, called directly in this process: resolve, generate, encode, upload."""

    def __init__(self, settings: Any, catalog: Catalog) -> None:
        from foundation.stores.factory import open_store
        from pipelines.runtime.cache import ModelCache

        self.settings, self.catalog = settings, catalog
        self.store = open_store(settings.store, data_dir=settings.data_dir)
        self.cache = ModelCache(settings.models)
        self.work = Path(tempfile.mkdtemp(prefix="bench-direct-", dir=settings.data_dir))

    def load_times(self, model: str) -> tuple[float, float]:
        """Seconds of a cold load and of a warm (cached) get of ``model``."""
        spec = self.catalog.models[model]
        started = time.perf_counter()
        self.cache.get(spec)
        cold_s = time.perf_counter() - started
        started = time.perf_counter()
        self.cache.get(spec)
        return cold_s, time.perf_counter() - started

    def run_job(self, shape: dict[str, Any], seed: int) -> dict[str, float]:
        """One job; seconds per stage and in total."""
        from foundation.core.resolve import resolve
        from foundation.media.encoder import encode_video
        from foundation.stores.base import artifact_key
        from pipelines.runtime.adapter import generate
        from worker.resolutions import rebuild_request

        record = _record(self.catalog, shape, seed)
        t0 = time.perf_counter()
        job, _hold = resolve(rebuild_request_from(record, rebuild_request), self.catalog)
        media = generate(self.cache.get(self.catalog.models[job.model]), job, lambda step, total: None)
        t1 = time.perf_counter()
        encoded = encode_video(
            media,
            keep_frames=job.keep_frames,
            width=job.width,
            height=job.height,
            out_dir=self.work / record.id,
            settings=self.settings.encoder,
        )
        t2 = time.perf_counter()
        for artifact, path in encoded.artifacts():
            self.store.put_file(
                artifact_key(record.id, 1, "bench", path.name), path, content_type=artifact.content_type
            )
        t3 = time.perf_counter()
        return {"denoising": t1 - t0, "encoding": t2 - t1, "uploading": t3 - t2, "total": t3 - t0}


def rebuild_request_from(record: GenerationRecord, rebuild: Any) -> Any:
    from foundation.queue.base import Claim

    return rebuild(Claim(job_id=record.id, model=record.model, attempt=1, record=record))


def queue_job(queue: JobQueue, catalog: Catalog, shape: dict[str, Any], seed: int) -> tuple[float, float]:
    """One job through the queue: (end-to-end ms, pick-up ms) from the enqueue call."""
    record = _record(catalog, shape, seed)
    enqueued_at = time.time()
    queue.enqueue(record)
    done, _ = wait_for(queue, record.id, terminal, timeout_s=300, poll_s=_POLL_S)
    assert done.status.value == "succeeded", done.error
    assert done.started_at is not None and done.finished_at is not None
    return (done.finished_at.timestamp() - enqueued_at) * 1000, (done.started_at.timestamp() - enqueued_at) * 1000


# The figures come from the worker's own timestamps (``started_at``/``finished_at``): poll slowly, as a
# tight poll loop would take CPU from the worker it measures (on 2 cores, ~5 % at 20 ms).
_POLL_S = 0.25


def interleaved(direct: DirectPath, queue: JobQueue, catalog: Catalog, n: int) -> dict[str, Any]:
    """Alternate a direct job and a queued job, so load on a shared machine hits both sides alike."""
    from concurrent.futures import ThreadPoolExecutor

    samples: dict[str, list[float]] = {"direct": [], "e2e": [], "pickup": []}
    stages: dict[str, list[float]] = {"denoising": [], "encoding": [], "uploading": []}
    # The worker runs jobs on a thread other than the main one; on a loaded CPU, torch's OpenMP
    # threading behaves differently on the main thread, so the direct side runs on one thread too.
    gpu_thread = ThreadPoolExecutor(max_workers=1)
    for i in range(n + 1):  # the first pair warms torch up on both sides and is not counted
        timings = gpu_thread.submit(direct.run_job, LATENCY_JOB, i).result()
        e2e_ms, pickup_ms = queue_job(queue, catalog, LATENCY_JOB, seed=i)
        if i:
            samples["direct"].append(timings["total"] * 1000)
            samples["e2e"].append(e2e_ms)
            samples["pickup"].append(pickup_ms)
            for stage, values in stages.items():
                values.append(timings[stage])
    return {**samples, "stages_s": {k: statistics.median(v) for k, v in stages.items()}}


def run_batch(queue: JobQueue, catalog: Catalog, shapes: list[dict[str, Any]]) -> dict[str, float]:
    """Enqueue a batch at once; jobs per minute from the first start to the last finish."""
    records = [_record(catalog, shape, seed=2000 + i) for i, shape in enumerate(shapes)]
    for record in records:
        queue.enqueue(record)
    done = [wait_for(queue, r.id, terminal, timeout_s=600, poll_s=_POLL_S)[0] for r in records]
    assert all(d.status.value == "succeeded" for d in done), [d.error for d in done]
    first = min(d.started_at.timestamp() for d in done if d.started_at)
    last = max(d.finished_at.timestamp() for d in done if d.finished_at)
    return {"jobs": len(done), "span_s": last - first, "jobs_per_min": 60 * len(done) / (last - first)}


def worker_env(base: Path, redis_url: str, models_dir: Path, *, overlap: bool) -> dict[str, str]:
    name = "overlap-on" if overlap else "overlap-off"
    settings = {
        "data_dir": str(base / name),
        "queue": {"backend": "redis", "redis_url": redis_url},
        "store": {"backend": "local", "local_root": str(base / name / "artifacts")},
        "models": {"tiny_models_dir": str(models_dir)},
        "worker": {"overlap": overlap, "preload": ["tiny-wan"]},
        "log_level": "INFO",  # the default: the lines a deployed worker logs
    }
    return settings_env(settings)


def daemon_pickup(
    n: int,
    *,
    also_hosted: tuple[str, ...] = (),
    busy: bool = False,
    worker: dict[str, Any] | None = None,
    tree: Path | None = None,
) -> dict[str, Any]:
    """Enqueue → adapter called, ``n`` jobs one at a time into an idle worker of ``instant-wan`` (and
    ``also_hosted``, with no jobs), on its own Redis. Each job is enqueued once the previous one ended
    and the worker is back in its blocking claim; both times are the machine's wall clock. ``busy``:
    with every core kept from idling by a lowest-priority load (``bench_load``). ``worker``: settings of
    the ``worker`` section besides the hosted models; ``tree``: another checkout whose code the worker
    runs (an A/B against a commit: ``scripts/bench_optional.py``)."""
    if busy:
        with busy_cores() as spinners:
            return {**daemon_pickup(n, also_hosted=also_hosted, worker=worker, tree=tree), "busy_cores": spinners}
    from tests.integration.worker_harness import write_test_catalog

    base = Path(tempfile.mkdtemp(prefix="bench-pickup-"))
    catalog_path = write_test_catalog(base / "catalog.yaml")
    catalog = load_catalog(catalog_path)
    calls = base / "calls.log"
    models_dir = Path(os.environ.get("GENWORKER_MODELS__TINY_MODELS_DIR", ROOT / "var" / "models"))
    redis = start_redis(base / "redis")
    hosted = ["instant-wan", *also_hosted]
    settings = {
        "data_dir": str(base / "data"),
        "catalog_path": str(catalog_path),
        "queue": {"backend": "redis", "redis_url": redis.url},
        "store": {"backend": "local", "local_root": str(base / "data" / "artifacts")},
        "models": {"tiny_models_dir": str(models_dir)},
        "worker": {"hosted_models": hosted, "preload": ["instant-wan"], **(worker or {})},
        "log_level": "INFO",  # the default: the lines a deployed worker logs
    }
    env = {**settings_env(settings), "GENWORKER_TEST_CALL_LOG": str(calls)}
    from foundation.queue.config import QueueSettings
    from foundation.queue.factory import open_queue

    queue = open_queue(QueueSettings(backend="redis", redis_url=redis.url))
    command = None if tree is None else [sys.executable, "-m", "genworker.cli", "worker"]
    daemon = WorkerProcess(env, base / "worker.log", command=command, cwd=tree or ROOT)
    samples: list[float] = []
    claimed: list[float] = []  # of those, the enqueue call → the claim's start (``started_at``)
    floor: list[float] = []  # bare Streams' pick-up, one after each job: the host's wake-up cost then
    raw, raw_lane = raw_streams_lane(redis.port, n + 3, "daemon")
    try:
        daemon.start().wait_ready()
        with Consumers([raw_lane]) as bare:
            for i in range(n + 3):  # the first 3 warm the worker up and are not counted
                record = make_record(catalog, "instant-wan", variant="fast", resolution="144p", duration_seconds=1)
                time.sleep(0.05)  # the worker is back in its blocking claim
                enqueued_at = time.time()
                queue.enqueue(record)
                time.sleep(0.02)  # no poll competes with the pick-up for the 2 cores
                done, _ = wait_for(queue, record.id, terminal, timeout_s=60, poll_s=0.02)
                called = dict(line.split("\t") for line in calls.read_text(encoding="utf-8").splitlines())
                raw_ms = bare.sample(0) * 1000
                if i >= 3 and done.started_at is not None:
                    samples.append((float(called[record.input.prompt]) - enqueued_at) * 1000)
                    claimed.append((done.started_at.timestamp() - enqueued_at) * 1000)
                    floor.append(raw_ms)
    finally:
        daemon.stop()
        queue.close()
        raw.close()
        redis.stop()
    # The claim's start → the adapter: the claim's reply reaching the worker, then the daemon's own work.
    started = [pickup - claim for pickup, claim in zip(samples, claimed, strict=True)]
    return {
        "hosted": hosted,
        "jobs": n,
        "pickup_p50_ms": round(_pct(samples, 0.5), 3),
        "pickup_p99_ms": round(_pct(samples, 0.99), 3),
        "enqueue_to_claim_p50_ms": round(_pct(claimed, 0.5), 3),
        "enqueue_to_claim_p99_ms": round(_pct(claimed, 0.99), 3),
        "claim_to_adapter_p50_ms": round(_pct(started, 0.5), 3),
        "claim_to_adapter_p99_ms": round(_pct(started, 0.99), 3),
        "raw_streams_pickup_p50_ms": round(_pct(floor, 0.5), 3),
        "samples_ms": [round(v, 3) for v in samples],
    }


def run(quick: bool = False, gpu: bool = False) -> dict[str, Any]:
    """Both workers (overlap on / off) idle on separate Redis databases; measurements alternate."""
    from foundation.queue.config import QueueSettings
    from foundation.queue.factory import open_queue
    from foundation.settings import load_settings
    from pipelines.tiny.builders import build_all

    n, batch, rounds = (6, 6, 2) if quick else (20, 12, 3)
    base = Path(tempfile.mkdtemp(prefix="bench-worker-"))
    models_dir = Path(os.environ.get("GENWORKER_MODELS__TINY_MODELS_DIR", ROOT / "var" / "models"))
    build_all(models_dir)
    catalog = load_catalog()
    store = {"backend": "local", "local_root": str(base / "direct" / "artifacts")}
    settings = load_settings(
        None, data_dir=str(base / "direct"), store=store, models={"tiny_models_dir": str(models_dir)}
    )
    Path(settings.data_dir).mkdir(parents=True, exist_ok=True)
    direct = DirectPath(settings, catalog)
    cold_s, warm_s = direct.load_times("tiny-wan")
    redis = start_redis(base / "redis")
    urls = {True: redis.url, False: redis.url.rsplit("/", 1)[0] + "/1"}
    queues = {on: open_queue(QueueSettings(backend="redis", redis_url=url)) for on, url in urls.items()}
    workers = {
        on: WorkerProcess(worker_env(base, urls[on], models_dir, overlap=on), base / f"w{on}.log") for on in urls
    }
    try:
        for worker in workers.values():
            worker.start()
        for worker in workers.values():
            worker.wait_ready()
        pairs = interleaved(direct, queues[True], catalog, n)
        throughput: dict[bool, list[float]] = {True: [], False: []}
        for on in (True, False):  # load tiny-ltx2 and warm torch up (several jobs) in both workers first
            run_batch(queues[on], catalog, [THROUGHPUT_JOB] * 3)
        for _ in range(rounds):
            for on in (True, False):
                throughput[on].append(run_batch(queues[on], catalog, [THROUGHPUT_JOB] * batch)["jobs_per_min"])
        mixed = [{**LATENCY_JOB, "model": m} for m in ["tiny-ltx2", "tiny-wan"] * (batch // 2)]
        loads_before = workers[True].metric("genworker_model_load_seconds_count")
        run_batch(queues[True], catalog, mixed)
        mixed_loads = workers[True].metric("genworker_model_load_seconds_count") - loads_before
    finally:
        for worker in workers.values():
            worker.stop()
        for queue in queues.values():
            queue.close()
        redis.stop()
    pickups = [
        daemon_pickup(n * 3, also_hosted=also, busy=busy) for busy in (False, True) for also in ((), ("tiny-wan",))
    ]
    on_jpm, off_jpm = statistics.median(throughput[True]), statistics.median(throughput[False])
    return {
        "job": LATENCY_JOB,
        "jobs_per_sample_set": n,
        "store": "local directory on both sides of the ratio; queue: Redis",
        "overhead_ratio": statistics.median(pairs["e2e"]) / statistics.median(pairs["direct"]),
        "direct_samples_ms": pairs["direct"],
        "queue_e2e_samples_ms": pairs["e2e"],
        "pickup_samples_ms": pairs["pickup"],
        "pickup_p50_ms": _pct(pairs["pickup"], 0.5),
        "pickup_p99_ms": _pct(pairs["pickup"], 0.99),
        "stages_s": pairs["stages_s"],
        "throughput": {
            "job": THROUGHPUT_JOB,
            "batch": batch,
            "rounds": rounds,
            "overlap_on_jobs_per_min": on_jpm,
            "overlap_off_jobs_per_min": off_jpm,
            "speedup": on_jpm / off_jpm,
        },
        "daemon_pickup": pickups,
        "loads": {
            "cold_load_s": cold_s,
            "warm_get_s": warm_s,
            "mixed_batch_jobs": len(mixed),
            "mixed_batch_jobs_that_paid_a_load": mixed_loads,
            "fifo_would_pay": len(mixed),
        },
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--pickup", type=int, metavar="N", help="only the daemon pick-up, over N jobs")
    args = parser.parse_args()
    if args.pickup:
        result: Any = [
            daemon_pickup(args.pickup, also_hosted=also, busy=busy)
            for busy in (False, True)
            for also in ((), ("tiny-wan",))
        ]
    else:
        result = run(quick=args.quick)
    print(json.dumps(result, indent=2, default=str))
