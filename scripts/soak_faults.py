"""The fault side of ``scripts/soak.py --faults``: a Sentinel deployment, a restartable SeaweedFS, a
fleet whose workers can be killed, and the injector that breaks them on a schedule.

- Redis: a primary, two replicas and three sentinels (``tests.fixtures.redis_sentinel``), every data
  node with AOF and ``DEBUG`` enabled from loopback; the fleet runs in ``sentinel`` mode with
  ``wait_replicas: 1``, so what was acknowledged survives the primary's ``kill -9``.
- SeaweedFS: ``tests.reliability.support.RestartableSeaweed`` (same ports and data across restarts).
- ``Injector``: every ``interval_s`` the next fault of a shuffled round of the four kinds —
  ``kill_worker`` (``kill -9`` of a random worker, restarted at once, as a supervisor would),
  ``redis_stall`` (``DEBUG SLEEP`` on the primary, longer than the clients' socket timeout),
  ``failover`` (``kill -9`` of the primary; restarted once the sentinels promoted a replica, to
  rejoin as a replica), ``store_restart`` (SeaweedFS stopped for ``store_down_s``, then started).
  Each is logged with its offset from the start: the schedule the report prints.
- Projects (``--projects N``, 5 in ``make soak``): the jobs are spread over N projects, one key each,
  the first (``heavy``) queueing ``HEAVY_SHARE`` times as many as each of the others; the report gives
  each project's waits (``project_waits``) and the check that no project starves (``starved``).
"""

from __future__ import annotations

import math
import random
import signal
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import redis

from foundation.settings import settings_env
from tests.fixtures.redis_sentinel import SentinelGroup, start_sentinel_group
from tests.reliability.support import RestartableSeaweed

__all__ = [
    "FAULTS",
    "Fleet",
    "Injector",
    "project_names",
    "project_of",
    "project_waits",
    "start_redis_group",
    "starved",
]

FAULTS = ("kill_worker", "redis_stall", "failover", "store_restart")
# Longer than the fleet's 2 s socket timeout, shorter than the sentinels' down-after (5 s): a stall,
# not a failover (a stall past down-after is a split brain: docs/reliability.md).
STALL_S = 3
HEAVY_SHARE = 10  # the heavy project queues this many jobs for each job of every other project
STARVED_RATIO = 3.0  # a project whose p95 wait is above this many times the median project's starves
# Waits this short are scheduling noise (a worker's next claim), not starvation: the median is at least this.
WAIT_FLOOR_S = 1.0


def start_redis_group(directory: Path) -> SentinelGroup:
    """Primary + two replicas + three sentinels; AOF on, DEBUG allowed from loopback (the stalls)."""
    return start_sentinel_group(
        directory, replicas=2, extra_args=("--appendonly", "yes", "--enable-debug-command", "local")
    )


@dataclass
class Fleet:
    """The worker and API processes of the soak; a worker can be killed and restarted in place."""

    env: dict[str, str]
    logs: Path
    workers: int
    apis: int
    worker_procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    api_procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    urls: list[str] = field(default_factory=list)
    restarts: int = 0

    def start(self, free_port: Any) -> list[str]:
        for i in range(self.workers):
            self.worker_procs.append(self._worker(i, free_port()))
        for i in range(self.apis):
            port = free_port()
            cmd = [sys.executable, "-m", "genworker.cli", "api", "--host", "127.0.0.1", "--port", str(port)]
            out = (self.logs / f"api-{i}.log").open("ab")
            self.api_procs.append(subprocess.Popen(cmd, env=self.env, stdout=out, stderr=subprocess.STDOUT))
            self.urls.append(f"http://127.0.0.1:{port}")
        return self.urls

    def kill_worker(self, i: int, free_port: Any) -> int:
        """``kill -9`` worker ``i`` (no drain, no release: its lease must lapse) and start a new one."""
        proc = self.worker_procs[i]
        pid = proc.pid
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        self.worker_procs[i] = self._worker(i, free_port())
        self.restarts += 1
        return pid

    def stop(self) -> None:
        procs = self.worker_procs + self.api_procs
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def _worker(self, i: int, metrics_port: int) -> subprocess.Popen[bytes]:
        env = {**self.env, **settings_env({"worker": {"metrics_port": metrics_port}})}
        out = (self.logs / f"worker-{i}.log").open("ab")
        cmd = [sys.executable, "-m", "genworker.cli", "worker"]
        return subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT)


@dataclass
class Injector:
    """Breaks one thing every ``interval_s`` until ``stop`` is set; ``schedule`` lists what it did."""

    fleet: Fleet
    group: SentinelGroup
    weed: RestartableSeaweed
    free_port: Any
    interval_s: float
    store_down_s: float = 3.0
    seed: int = 1
    stop: threading.Event = field(default_factory=threading.Event)
    schedule: list[dict[str, Any]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    _started: float = 0.0

    def run(self) -> None:
        rng = random.Random(self.seed)
        self._started = time.monotonic()
        kinds: list[str] = []
        while not self.stop.wait(self.interval_s):
            if not kinds:
                kinds = list(FAULTS)
                rng.shuffle(kinds)
            kind = kinds.pop()
            try:
                detail = getattr(self, kind)(rng)
            except Exception as e:  # a fault that could not be injected is reported, not hidden
                self.errors.append(f"{kind}: {type(e).__name__}: {e}")
                continue
            self.schedule.append({"t_s": round(time.monotonic() - self._started, 1), "fault": kind, **detail})

    def covered(self) -> bool:
        """Every fault kind has been injected at least once."""
        return {entry["fault"] for entry in self.schedule} >= set(FAULTS)

    def kill_worker(self, rng: random.Random) -> dict[str, Any]:
        i = rng.randrange(self.fleet.workers)
        return {"worker": i, "pid": self.fleet.kill_worker(i, self.free_port)}

    def redis_stall(self, rng: random.Random) -> dict[str, Any]:
        port = self.group.primary_port()
        client = redis.Redis(host="127.0.0.1", port=port, socket_timeout=STALL_S + 10)
        try:
            client.execute_command("DEBUG", "SLEEP", STALL_S)
        finally:
            client.close()
        return {"primary": port, "stall_s": STALL_S}

    def failover(self, rng: random.Random) -> dict[str, Any]:
        old = self.group.primary_port()
        started = time.monotonic()
        self.group.server_on(old).kill()
        new = self.group.wait_failover(old)
        took = time.monotonic() - started
        self.group.server_on(old).start()  # back as a replica of the new primary (the sentinels say so)
        return {"old_primary": old, "new_primary": new, "failover_s": round(took, 1)}

    def store_restart(self, rng: random.Random) -> dict[str, Any]:
        self.weed.stop()
        time.sleep(self.store_down_s)
        self.weed.start()
        return {"down_s": self.store_down_s}


# --------------------------------------------------------------------------------------------- projects
def project_names(count: int) -> list[str]:
    """The soak's projects: ``soak`` alone, or ``heavy`` and ``light-1`` .. ``light-<count-1>``."""
    if count <= 1:
        return ["soak"]
    return ["heavy", *(f"light-{n}" for n in range(1, count))]


def project_of(i: int, projects: list[str]) -> str:
    """Job ``i``'s project: in every ``HEAVY_SHARE + len(projects) - 1`` jobs, ``HEAVY_SHARE`` are the heavy
    project's and one is each other project's, interleaved as clients would send them."""
    if len(projects) == 1:
        return projects[0]
    cycle = [*projects[1:], *[projects[0]] * HEAVY_SHARE]
    # A step prime to the cycle's length visits each slot once per cycle, the light ones spread out.
    step = next(k for k in range(len(cycle) // 3, len(cycle) + 1) if math.gcd(k, len(cycle)) == 1)
    return cycle[(i * step) % len(cycle)]


def _p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[math.ceil(0.95 * len(ordered)) - 1]


def _head_waits(records: list[dict[str, Any]]) -> list[float]:
    """How long each job of one project waited once it was its project's oldest queued job: from its create,
    or from the start of the job before it in its project (FIFO within a project), to its own start. The
    scheduler's share of the wait; the rest is the project's own backlog."""
    runs = sorted((r for r in records if r.get("started_at")), key=lambda r: r["created_at"])
    waits, previous = [], None
    for record in runs:
        created, started = datetime.fromisoformat(record["created_at"]), datetime.fromisoformat(record["started_at"])
        head = created if previous is None else max(created, previous)
        waits.append(max(0.0, (started - head).total_seconds()))
        previous = started
    return waits


def project_waits(records: dict[str, dict[str, Any]], project_of_job: dict[str, str]) -> dict[str, dict[str, Any]]:
    """Per project: jobs, p95 of the whole wait (create to start) and p95 of the head wait (``_head_waits``)."""
    by_project: dict[str, list[dict[str, Any]]] = {}
    for gid, record in records.items():
        by_project.setdefault(project_of_job[gid], []).append(record)
    report = {}
    for project, mine in sorted(by_project.items()):
        started = [r for r in mine if r.get("started_at")]
        waits = [
            (datetime.fromisoformat(r["started_at"]) - datetime.fromisoformat(r["created_at"])).total_seconds()
            for r in started
        ]
        heads = _head_waits(mine)
        report[project] = {
            "jobs": len(mine),
            "started": len(started),
            "wait_p95_s": round(_p95(waits), 2) if waits else None,
            "head_wait_p95_s": round(_p95(heads), 2) if heads else None,
        }
    return report


def starved(waits: dict[str, dict[str, Any]]) -> list[str]:
    """Projects whose p95 head wait is above ``STARVED_RATIO`` times the median project's (at least
    ``WAIT_FLOOR_S``). The head wait, not the whole wait: the heavy project's own backlog is its own."""
    p95s = {p: w["head_wait_p95_s"] for p, w in waits.items() if w["head_wait_p95_s"] is not None}
    if len(p95s) < 2:
        return []
    bound = STARVED_RATIO * max(WAIT_FLOOR_S, statistics.median(p95s.values()))
    return [p for p, v in p95s.items() if v > bound]
