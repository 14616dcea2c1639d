"""SQLite leases and due times are on the machine's monotonic clock, per boot (``sqlite_clock``).

A real SQLite file throughout. The clocks are the queue's own seam (``Clock``): a test steps the
wall clock as NTP would, moves the monotonic clock as time passes, or names another boot. The
migration test opens a file in the previous version's layout from several processes at once.
"""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

import pytest

from foundation.core.contract import ErrorInfo, GenerationRecord, Status
from foundation.core.errors import ErrorCode
from foundation.queue import records
from foundation.queue.base import Claim, Outcome, WorkerHeartbeat
from foundation.queue.sqlite.backend import SqliteQueue
from foundation.queue.sqlite.clock import Clock, read_boot_id
from tests.integration.queue_support import new_record

ROOT = Path(__file__).resolve().parents[2]
LEASE_S = 30.0
HOUR_S = 3600.0


@dataclass
class Times:
    """What the queue's clocks read: the test moves them."""

    mono: float = 1_000.0
    wall: float = 1_800_000_000.0

    def clock(self, boot_id: str = "boot-a") -> Clock:
        return Clock(monotonic=lambda: self.mono, wall=lambda: self.wall, boot_id=boot_id)


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "queue.db"


@pytest.fixture
def times() -> Times:
    return Times()


@pytest.fixture
def q(path: Path, times: Times) -> Iterator[SqliteQueue]:
    queue = SqliteQueue(path, lease_ttl_s=LEASE_S, clock=times.clock())
    yield queue
    queue.close()


def claim_one(queue: SqliteQueue, worker_id: str = "w1") -> Claim:
    claim = queue.claim(worker_id, ["tiny-wan"])
    assert claim is not None
    return claim


def status_of(queue: SqliteQueue, job_id: str) -> Status:
    record = queue.get(job_id)
    assert record is not None
    return record.status


def test_a_wall_clock_step_neither_lapses_a_live_lease_nor_saves_a_lapsed_one(q: SqliteQueue, times: Times) -> None:
    renewed, abandoned = q.enqueue(new_record()).record, q.enqueue(new_record()).record
    held, dropped = claim_one(q), claim_one(q)
    assert (held.job_id, dropped.job_id) == (renewed.id, abandoned.id)

    times.wall += HOUR_S  # NTP steps the wall clock an hour ahead: every wall-clock lease would lapse
    assert q.reclaim_expired() == 0 and q.claim("rival", ["tiny-wan"]) is None
    assert status_of(q, renewed.id) is Status.running and status_of(q, abandoned.id) is Status.running

    times.wall -= 2 * HOUR_S  # and an hour behind: a wall-clock lease would now hold an hour too long
    times.mono += LEASE_S * 0.6
    assert q.renew(held)  # only the holder of `renewed` is still alive
    times.mono += LEASE_S * 0.6  # 1.2 leases since `dropped` was claimed, 0.6 since `held` renewed
    assert q.reclaim_expired() == 1
    assert status_of(q, abandoned.id) is Status.queued and status_of(q, renewed.id) is Status.running
    assert [e.reason for e in q.events(abandoned.id)][-1] == "lease_expired"
    assert not q.renew(dropped) and not q.finish(dropped, Outcome(status=Status.succeeded))
    again = claim_one(q, "w2")
    assert again.job_id == abandoned.id and again.attempt == 2
    assert q.finish(held, Outcome(status=Status.succeeded)) and q.finish(again, Outcome(status=Status.succeeded))


def test_a_wall_clock_step_neither_hides_queued_jobs_nor_hurries_a_retry(q: SqliteQueue, times: Times) -> None:
    failing = q.enqueue(new_record()).record
    error = ErrorInfo(code=ErrorCode.upload_failed, message="store down")
    assert q.retry(claim_one(q), error, delay_s=60.0)
    times.wall -= HOUR_S  # a backward step: wall-clock due times would hide the backlog for an hour
    waiting = q.enqueue(new_record()).record
    assert claim_one(q).job_id == waiting.id  # the retry is not due; the new job is not hidden
    times.wall += 2 * HOUR_S  # a forward step: a wall-clock backoff would be over at once
    assert q.claim("w1", ["tiny-wan"]) is None and q.depth("tiny-wan") == 1
    times.mono += 61.0  # the backoff passes on the monotonic clock
    again = claim_one(q)
    assert again.job_id == failing.id and again.attempt == 2


def set_lease_boot(path: Path, job_id: str, boot_id: str | None) -> None:
    """Rewrite one lease's boot, as a row written in another boot (or before leases had one) reads."""
    with closing(sqlite3.connect(path)) as conn, conn:
        conn.execute("UPDATE jobs SET lease_boot = ? WHERE id = ?", (boot_id, job_id))


def test_a_lease_of_another_boot_or_of_none_is_reclaimed(path: Path) -> None:
    with closing(SqliteQueue(path, lease_ttl_s=LEASE_S)) as q:  # the machine's own clocks and boot id
        jobs = [q.enqueue(new_record()).record for _ in range(3)]
        other_boot, no_boot, live = (claim_one(q) for _ in jobs)
        set_lease_boot(path, other_boot.job_id, "00000000-0000-4000-8000-000000000000")
        set_lease_boot(path, no_boot.job_id, None)
        assert q.reclaim_expired() == 2  # their deadlines are 30 s ahead, but on no clock of this boot
        assert status_of(q, other_boot.job_id) is Status.queued and status_of(q, no_boot.job_id) is Status.queued
        assert q.renew(live) and status_of(q, live.job_id) is Status.running
        assert not q.renew(other_boot) and not q.renew(no_boot)
        assert {claim_one(q).attempt, claim_one(q).attempt} == {2}


def test_after_a_reboot_queued_jobs_are_due_in_order_and_old_leases_lapse(path: Path) -> None:
    before = Times(mono=900_000.0)  # a long uptime; after the reboot the clock starts near zero
    with closing(SqliteQueue(path, lease_ttl_s=LEASE_S, clock=before.clock("boot-a"))) as q:
        backing_off, running, first, second = (q.enqueue(new_record()).record for _ in range(4))
        error = ErrorInfo(code=ErrorCode.upload_failed, message="store down")
        assert q.retry(claim_one(q), error, delay_s=300.0)  # due 300 s after, on boot-a's clock
        assert claim_one(q).job_id == running.id
        q.heartbeat(WorkerHeartbeat(worker_id="w1", hosted_models=["tiny-wan"]), ttl_s=15.0)

    after = Times(mono=50.0)
    with closing(SqliteQueue(path, lease_ttl_s=LEASE_S, clock=after.clock("boot-b"))) as q:
        assert q.live_workers() == []  # the old boot's workers are gone
        order = [claim_one(q) for _ in range(4)]  # the first claim also reclaims the old boot's lease
        assert [(c.job_id, c.attempt) for c in order] == [
            (first.id, 1),
            (second.id, 1),
            (backing_off.id, 2),  # its backoff is over: the reboot took longer
            (running.id, 2),
        ]
        assert "lease_expired" in [e.reason for e in q.events(running.id)]


def test_heartbeats_expire_on_the_monotonic_clock(q: SqliteQueue, times: Times) -> None:
    q.heartbeat(WorkerHeartbeat(worker_id="w1", hosted_models=["tiny-wan"]), ttl_s=15.0)
    times.wall += HOUR_S
    assert [b.worker_id for b in q.live_workers()] == ["w1"]
    times.mono += 16.0
    assert q.live_workers() == []


# The jobs table as the version before lease boots wrote it (times on the wall clock, no clock table).
_LEGACY_JOBS = """CREATE TABLE jobs (
    id TEXT PRIMARY KEY, model TEXT NOT NULL, project TEXT NOT NULL, status TEXT NOT NULL,
    attempt INTEGER NOT NULL DEFAULT 0, released INTEGER NOT NULL DEFAULT 0,
    cancel INTEGER NOT NULL DEFAULT 0, record TEXT NOT NULL, created_ms REAL NOT NULL,
    ready_at REAL, queue_seq INTEGER, token TEXT, lease_expires_at REAL)"""
_OPEN = "import sys; from foundation.queue.sqlite.backend import SqliteQueue; SqliteQueue(sys.argv[1]).close()"


def write_legacy_file(path: Path) -> tuple[GenerationRecord, GenerationRecord, GenerationRecord]:
    """A due job, a job backing off for 600 s and a running one (its holder stopped for the upgrade)."""
    due, backing_off = (records.enqueued(new_record(), max_attempts=3) for _ in range(2))
    running = records.started(records.enqueued(new_record(), max_attempts=3))
    now = time.time()
    rows = [
        (due, now - 5, 1, None, None),
        (backing_off, now + 600, 2, None, None),
        (running, None, None, "token-1", now + LEASE_S),
    ]
    with closing(sqlite3.connect(path)) as conn, conn:
        conn.execute(_LEGACY_JOBS)
        for rec, ready_at, seq, token, lease in rows:
            conn.execute(
                "INSERT INTO jobs VALUES (?, ?, ?, ?, ?, 0, 0, ?, ?, ?, ?, ?, ?)",
                (
                    rec.id,
                    rec.model,
                    rec.project,
                    rec.status.value,
                    rec.attempt,
                    rec.model_dump_json(),
                    rec.created_at.timestamp() * 1000,
                    ready_at,
                    seq,
                    token,
                    lease,
                ),
            )
    return due, backing_off, running


def test_a_file_from_the_previous_version_is_migrated_once_by_processes_opening_it_together(path: Path) -> None:
    due, backing_off, running = write_legacy_file(path)
    openers = [subprocess.Popen([sys.executable, "-c", _OPEN, str(path)], cwd=ROOT) for _ in range(4)]
    assert [p.wait(timeout=120) for p in openers] == [0, 0, 0, 0]
    with closing(sqlite3.connect(path)) as conn:
        columns = [row[1] for row in conn.execute("PRAGMA table_info(jobs)")]
        boots = conn.execute("SELECT boot_id FROM clock").fetchall()
        (backoff_left_s,) = conn.execute("SELECT ready_at FROM jobs WHERE id = ?", (backing_off.id,)).fetchone()
    assert columns.count("lease_boot") == 1 and boots == [(read_boot_id(),)]
    assert 590 < backoff_left_s - time.monotonic() <= 600  # its due time kept, now on the monotonic clock
    with closing(SqliteQueue(path, lease_ttl_s=LEASE_S)) as q:
        assert q.reclaim_expired() == 1  # the old version's lease has no boot: its holder is gone
        assert [(c.job_id, c.attempt) for c in (claim_one(q), claim_one(q))] == [(due.id, 1), (running.id, 2)]
        assert q.claim("w1", ["tiny-wan"]) is None and q.position(backing_off.id) == 0


def test_the_boot_id_is_this_machines() -> None:
    boot = read_boot_id()
    assert boot == Path("/proc/sys/kernel/random/boot_id").read_text().strip() and len(boot) == 36
