"""The clocks of the embedded SQLite queue, and how a file is put on this boot's clock when opened.

Every timer that decides what happens to a job is read on ``CLOCK_MONOTONIC`` (``time.monotonic``):
when a queued row becomes claimable (``jobs.ready_at``), when a lease lapses
(``jobs.lease_expires_at``), when a worker's heartbeat ends (``workers.expires_at``). That clock is
one per machine (every process sharing the file reads the same one) and an NTP or manual step of the
wall clock never moves it, so a step can neither lapse a lease its holder renews nor keep one alive
that it stopped renewing, nor hide queued jobs for the length of a backward step.

It restarts at each boot, so a value is only meaningful with the boot it was read in, named by
``/proc/sys/kernel/random/boot_id``:

- a lease carries its own boot (``jobs.lease_boot``): a lease of another boot, or with none (a row
  written before this column existed), counts as lapsed: its holder cannot still be running;
- the other columns are on the file's boot (table ``clock``). The first open in a new boot (or of a
  file from before this table) puts them on this boot: queued rows become due at once in their old
  order (a reboot waits longer than any retry backoff; a file whose times were wall clock keeps its
  due times exactly) and the heartbeats of the old boot's workers are dropped.

The wall clock stays where a time must mean the same thing across reboots or to people: record and
event timestamps, the listing order (``created_ms``), the 24 h idempotency expiry.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["BOOT_ID_PATH", "Clock", "read_boot_id", "rebase"]

BOOT_ID_PATH = Path("/proc/sys/kernel/random/boot_id")


def read_boot_id(path: Path = BOOT_ID_PATH) -> str:
    """This boot's id (Linux). Elsewhere a stand-in, the wall time of the boot to the second: a step
    (or drift) of the wall clock can change it between processes, and then a lease lapses early, as
    every lease could on a step before; fencing still refuses the old holder's writes."""
    try:
        return path.read_text().strip()
    except OSError:
        return f"booted-at-{round(time.time() - time.monotonic())}"


@dataclass(frozen=True)
class Clock:
    """The queue's clocks; tests pass their own functions (stepped, or another boot)."""

    monotonic: Callable[[], float] = time.monotonic
    wall: Callable[[], float] = time.time
    boot_id: str = field(default_factory=read_boot_id)


def rebase(conn: sqlite3.Connection, clock: Clock) -> None:
    """Put the file's monotonic columns on this boot's clock, once per boot. Run inside the open's
    write transaction, so processes opening together rebase exactly once."""
    row = conn.execute("SELECT boot_id FROM clock").fetchone()
    if row is not None and row[0] == clock.boot_id:
        return
    now = clock.monotonic()
    if row is None:  # written by a version whose times were wall clock: keep every due time
        shift = now - clock.wall()
    else:  # another boot's clock: due now, oldest first, the last one exactly now
        latest = conn.execute("SELECT MAX(ready_at) FROM jobs WHERE status = 'queued'").fetchone()[0]
        shift = now - (latest if latest is not None else now)
    conn.execute("UPDATE jobs SET ready_at = ready_at + ? WHERE status = 'queued'", (shift,))
    conn.execute("DELETE FROM workers")  # the old boot's processes are gone (the wall-clock ones too)
    conn.execute("DELETE FROM clock")
    conn.execute("INSERT INTO clock (boot_id) VALUES (?)", (clock.boot_id,))
