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
"""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis

from foundation.settings import settings_env
from tests.fixtures.redis_sentinel import SentinelGroup, start_sentinel_group
from tests.reliability.support import RestartableSeaweed

__all__ = ["FAULTS", "Fleet", "Injector", "start_redis_group"]

FAULTS = ("kill_worker", "redis_stall", "failover", "store_restart")
# Longer than the fleet's 2 s socket timeout, shorter than the sentinels' down-after (5 s): a stall,
# not a failover (a stall past down-after is a split brain: docs/reliability.md).
STALL_S = 3


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
