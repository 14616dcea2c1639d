"""A worker's own faults: backoff per model or worker-wide, readiness and metrics that say why, and the
rule that fails a job whose model did not load on enough distinct workers."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from foundation.core.contract import Status
from foundation.core.errors import ErrorCode
from foundation.queue.base import Claim, Event, WorkerHeartbeat
from worker.faults import LocalFaults, releasers
from worker.health import HealthState
from worker.metrics import WorkerMetrics
from worker.verdict import FaultKind, Verdict


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Fleet:
    """A ``FleetView`` with fixed answers (what the queue's events and heartbeats would say)."""

    def __init__(self, events: list[Event], hosts: int) -> None:
        self._events = events
        self._beats = [WorkerHeartbeat(worker_id=f"h{i}", hosted_models=["m"]) for i in range(hosts)]

    def events(self, job_id: str | None = None, *, after: str | None = None, limit: int = 1000) -> list[Event]:
        return self._events

    def live_workers(self) -> list[WorkerHeartbeat]:
        return self._beats


def event(status: Status, reason: str) -> Event:
    return Event(job_id="j", status=status, attempt=1, at=datetime.now(UTC), reason=reason)


def history(*workers: str, reason: str = "released: model_load") -> list[Event]:
    """Each worker claimed the job and released it (by default: its model would not load there)."""
    out = [event(Status.queued, "enqueued")]
    for w in workers:
        out += [event(Status.running, f"claimed by {w}"), event(Status.queued, reason)]
    return out


def faults(metrics: WorkerMetrics, clock: Clock, fleet: Fleet | None = None, n: int = 3) -> LocalFaults:
    return LocalFaults(
        metrics, ["m", "other"], worker_id="me", base_s=10, cap_s=40, load_failure_workers=n, fleet=fleet, clock=clock
    )


def value(metrics: WorkerMetrics, name: str, **labels: str) -> float:
    got = metrics.registry.get_sample_value(name, labels)
    return 0.0 if got is None else got


def test_a_model_fault_backs_off_that_model_doubling_to_the_cap_and_clears_on_success() -> None:
    clock, metrics = Clock(), WorkerMetrics()
    metrics.host(["m", "other"])
    metrics.set_ready(True)
    lf = faults(metrics, clock)
    waits = [lf.report(FaultKind.model_load, "m", "weights missing") for _ in range(4)]
    assert waits == [10, 20, 40, 40]
    assert lf.claimable(["m", "other"]) == ["other"]
    assert lf.ready_models() == ["other"]
    assert value(metrics, "genworker_model_ready", model="m") == 0
    assert value(metrics, "genworker_model_ready", model="other") == 1
    assert value(metrics, "genworker_worker_fault", kind="model_load", model="m") == 1
    assert value(metrics, "genworker_local_faults_total", kind="model_load", model="m") == 4
    clock.now += 40
    assert lf.claimable(["m", "other"]) == ["m", "other"]  # the probe may claim
    assert lf.ready_models() == ["other"]  # but not ready until a job gets past the load
    lf.clear("m", FaultKind.model_load, FaultKind.device)
    assert lf.ready_models() == ["m", "other"]
    assert value(metrics, "genworker_worker_fault", kind="model_load", model="m") == 0
    assert value(metrics, "genworker_model_ready", model="m") == 1


def test_a_worker_wide_fault_stops_every_claim_and_readyz_says_why() -> None:
    clock, metrics = Clock(), WorkerMetrics()
    metrics.host(["m", "other"])
    lf = faults(metrics, clock)
    health = HealthState(metrics, lf)
    health.set_ready(True, "ready")
    assert health.ready
    lf.report(FaultKind.encoder, "m", "cannot start ffmpeg: [Errno 2] No such file")
    assert lf.claimable(["m", "other"]) == []
    assert 0 < lf.wait_s(60) <= 10
    assert not health.ready
    snap = health.snapshot()
    assert snap["ready"] is False and snap["models_ready"] == []
    assert snap["faults"] == [
        {
            "kind": "encoder",
            "model": None,
            "reason": "cannot start ffmpeg: [Errno 2] No such file",
            "failures": 1,
            "retry_in_s": 10.0,
        }
    ]
    json.dumps(snap)  # what /readyz sends
    assert value(metrics, "genworker_ready") == 0
    assert value(metrics, "genworker_worker_fault", kind="encoder", model="") == 1
    lf.clear("m", FaultKind.encoder, FaultKind.disk)
    assert health.ready and value(metrics, "genworker_ready") == 1


def test_releasers_are_the_workers_whose_claim_ended_in_a_release() -> None:
    events = history("a", "b", "a")
    events += [event(Status.running, "claimed by c"), event(Status.queued, "lease_expired")]
    assert releasers(events) == {"a", "b"}


def test_only_model_load_releases_count_toward_the_limit() -> None:
    events = history("a") + history("drained", reason="released") + history("d", reason="released: disk")
    assert releasers(events) == {"a"}


@pytest.mark.parametrize(
    ("prior", "hosts", "n", "fails"),
    [
        ([], 5, 3, False),  # first worker: release, let another try
        (["a"], 5, 3, False),
        (["a", "b"], 5, 3, True),  # the third distinct worker
        (["a", "a", "me"], 5, 3, False),  # the same workers again do not count twice
        ([], 1, 3, False),  # the only live host: its own fault, maybe; it backs off, the job waits
        ([], 0, 3, False),  # its own heartbeat not seen yet: alone too
        (["gone"], 1, 3, True),  # two distinct workers failed it (one has left since): the model's fault
        ([], 1, 1, True),  # told to fail at the first worker
        (["a"], 2, 3, True),  # every live host failed
    ],
)
def test_a_model_that_fails_on_enough_distinct_workers_fails_the_job(
    prior: list[str], hosts: int, n: int, fails: bool
) -> None:
    lf = faults(WorkerMetrics(), Clock(), Fleet(history(*prior), hosts), n=n)
    verdict = Verdict("release_local", ErrorCode.model_load_failed, "weights missing", FaultKind.model_load)
    got = lf.judge(_claim(), verdict)
    if fails:
        assert (got.action, got.code) == ("failed", ErrorCode.model_load_failed)
        assert "failed to load on" in got.message
    else:
        assert got == verdict


def test_hosts_a_fault_keeps_off_still_count_as_hosts() -> None:
    """Workers backing off the model leave it out of ``hosted_models`` (so the API reports it unavailable
    when nobody takes it) and name it in ``faulted_models``: still hosts that may load it once recovered."""
    fleet = Fleet(history("a"), 1)
    fleet._beats += [WorkerHeartbeat(worker_id=f"f{i}", hosted_models=[], faulted_models=["m"]) for i in range(2)]
    lf = faults(WorkerMetrics(), Clock(), fleet, n=3)
    verdict = Verdict("release_local", ErrorCode.model_load_failed, "weights missing", FaultKind.model_load)
    assert lf.judge(_claim(), verdict) == verdict  # 2 of 3 live hosts failed it: the third may load it


def test_worker_wide_faults_never_fail_the_job() -> None:
    lf = faults(WorkerMetrics(), Clock(), Fleet(history("a", "b", "c"), 1))
    verdict = Verdict("release_local", ErrorCode.encode_failed, "no ffmpeg", FaultKind.encoder)
    assert lf.judge(_claim(), verdict) == verdict


def _claim() -> Claim:
    from foundation.core.contract import GenerationRecord, Money, RecordInput, RecordParameters

    record = GenerationRecord(
        id="j",
        model="m",
        mode="text_to_video",
        variant="standard",
        parameters=RecordParameters(),
        input=RecordInput(prompt="p"),
        price_hold=Money(currency="USD", amount="0.01"),
    )
    return Claim(job_id="j", model="m", attempt=1, record=record)


def test_a_backend_fault_ends_when_the_backend_answers_not_when_the_backoff_does() -> None:
    metrics, clock = WorkerMetrics(), Clock()
    f = faults(metrics, clock)
    f.report(FaultKind.backend, "m", "store down")
    assert f.claimable(["m", "other"]) == []  # worker-wide: the store serves every model

    def down() -> None:
        raise ConnectionError("still down")

    f.probe_backend(down)
    assert f.claimable(["m", "other"]) == [] and f.ready_models() == []
    f.probe_backend(lambda: False)  # answered (the probe key does not exist): the outage is over
    assert f.claimable(["m", "other"]) == ["m", "other"] and f.ready_models() == ["m", "other"]
    assert clock.now == 1000.0  # well before the 10 s backoff would have ended


def test_a_backend_probe_leaves_other_faults_alone() -> None:
    metrics, clock = WorkerMetrics(), Clock()
    f = faults(metrics, clock)
    f.report(FaultKind.encoder, "m", "ffmpeg missing")
    called: list[int] = []
    f.probe_backend(lambda: called.append(1))
    assert called == [] and f.claimable(["m"]) == []
