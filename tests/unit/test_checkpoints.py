"""The worker's side of denoising checkpoints (``worker.checkpoints``) on a real local store: cadence,
the drain decision, the writer thread, refusals and deletion. The adapters' side (exact resume) is in
tests/pipelines/test_resume.py; the whole path with real workers in tests/integration/test_worker_crash.py."""

from __future__ import annotations

import threading
from pathlib import Path

import torch

from foundation.core.catalog import CheckpointPolicy
from foundation.stores.local import LocalStore
from pipelines.runtime.resume import DenoiseCheckpoint
from worker.checkpoints import DrainClock, JobCheckpoints, checkpoint_key, delete_checkpoint
from worker.logs import job_logger
from worker.metrics import WorkerMetrics

JOB = "gen_checkpoints"
TICK = 2**-10  # the smallest step the tests take on their clock (about 1 ms)


class _Drain:
    """The worker's shutdown as the checkpoints see it, on a clock that moves only when the test says: the step
    times, the cadence and the grace are then exact, however slowly this machine runs the test."""

    def __init__(self) -> None:
        self.draining = threading.Event()
        self.stop_now = threading.Event()
        self.deadline: float | None = None
        self.now = 1000.0

    def advance(self, seconds: float) -> None:
        self.now += seconds

    def clock(self) -> DrainClock:
        return DrainClock(self.draining, self.stop_now, lambda: self.deadline, clock=lambda: self.now)


def _checkpoints(
    tmp_path: Path, policy: CheckpointPolicy, drain: _Drain, metrics: WorkerMetrics
) -> tuple[JobCheckpoints, LocalStore]:
    store = LocalStore(tmp_path / "artifacts", b"0123456789abcdef0123", "http://127.0.0.1:1", 60)
    (tmp_path / "work").mkdir(exist_ok=True)
    log = job_logger(JOB, "tiny-wan", 1)
    checkpoints = JobCheckpoints(
        store,
        JOB,
        "tiny-wan",
        policy,
        metrics=metrics,
        log=log,
        drain=drain.clock(),
        finish_margin_s=1.0,
        work_root=tmp_path / "work",
    )
    return checkpoints, store


def _checkpoint(step: int) -> DenoiseCheckpoint:
    return DenoiseCheckpoint(
        fingerprint="f",
        step=step,
        total=10,
        samples=[[torch.full((4,), float(step))]],
        schedulers=[{"_step_index": step}],
    )


def _value(metrics: WorkerMetrics, name: str, **labels: str) -> float:
    value = metrics.registry.get_sample_value(name, labels)
    return 0.0 if value is None else value


def test_cadence_by_steps_and_the_latest_checkpoint_wins(tmp_path: Path) -> None:
    metrics = WorkerMetrics()
    checkpoints, store = _checkpoints(tmp_path, CheckpointPolicy(every_steps=3, every_s=None), _Drain(), metrics)
    assert checkpoints.load() is None  # nothing stored yet: a fresh start, not a refusal
    due = []
    for step in range(1, 10):
        if checkpoints.due(step, 10):
            due.append(step)
            checkpoints.save(_checkpoint(step))
    assert due == [3, 6, 9]
    checkpoints.close()  # waits for the writer
    stored = checkpoints.load()
    assert stored is not None and stored.step == 9 and torch.equal(stored.samples[0][0], torch.full((4,), 9.0))
    assert _value(metrics, "genworker_checkpoints_total", model="tiny-wan") >= 1
    assert _value(metrics, "genworker_checkpoint_bytes_total", model="tiny-wan") > 0
    assert not checkpoints.stop_requested
    delete_checkpoint(store, JOB, job_logger(JOB, "tiny-wan", 1))
    assert not store.exists(checkpoint_key(JOB))


def test_cadence_by_time(tmp_path: Path) -> None:
    drain = _Drain()
    checkpoints, _ = _checkpoints(tmp_path, CheckpointPolicy(every_s=0.25), drain, WorkerMetrics())
    drain.advance(0.25 - TICK)  # times in binary fractions: exact, so the boundaries are too
    assert not checkpoints.due(1, 10)
    drain.advance(TICK)
    assert checkpoints.due(2, 10)  # every_s after the start
    checkpoints.save(_checkpoint(2))
    drain.advance(0.25 - TICK)
    assert not checkpoints.due(3, 10)  # the clock restarts at each save
    drain.advance(TICK)
    assert checkpoints.due(4, 10)
    checkpoints.close()


def test_a_drain_stops_a_job_that_cannot_finish_in_the_grace_and_not_one_that_can(tmp_path: Path) -> None:
    drain = _Drain()
    checkpoints, _ = _checkpoints(tmp_path, CheckpointPolicy(every_s=3600), drain, WorkerMetrics())
    step_s = 1 / 64
    checkpoints.due(1, 100)
    drain.advance(step_s)
    assert not checkpoints.due(2, 100)  # no drain: nothing due
    drain.draining.set()
    drain.advance(step_s)
    drain.deadline = drain.now + 97 * step_s + 1.0  # 97 steps left + the 1 s margin: just fits
    assert not checkpoints.due(3, 100) and not checkpoints.stop_requested
    drain.advance(step_s)
    drain.deadline = drain.now + 96 * step_s + 1.0 - TICK  # a hair short: checkpoint now and stop
    assert checkpoints.due(4, 100) and checkpoints.stop_requested
    checkpoints.close()


def test_stop_now_checkpoints_the_step_in_flight(tmp_path: Path) -> None:
    drain = _Drain()
    checkpoints, _ = _checkpoints(tmp_path, CheckpointPolicy(every_s=3600), drain, WorkerMetrics())
    assert not checkpoints.due(1, 10)
    drain.stop_now.set()
    assert checkpoints.due(2, 10)
    checkpoints.close()


def test_a_corrupt_checkpoint_is_refused_and_counted(tmp_path: Path) -> None:
    metrics = WorkerMetrics()
    checkpoints, store = _checkpoints(tmp_path, CheckpointPolicy(), _Drain(), metrics)
    planted = tmp_path / "planted"
    planted.write_bytes(b"GWDENOISE1\nnot zlib at all")
    store.put_file(checkpoint_key(JOB), planted, content_type="application/octet-stream")
    assert checkpoints.load() is None
    assert _value(metrics, "genworker_checkpoints_refused_total", model="tiny-wan", reason="corrupt") == 1
    checkpoints.refused("fingerprint")
    assert _value(metrics, "genworker_checkpoints_refused_total", model="tiny-wan", reason="fingerprint") == 1
