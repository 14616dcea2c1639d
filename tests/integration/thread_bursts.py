"""Bursts of calls from new threads, and the file descriptors a process holds under a directory: how the
SQLite tests and ``scripts/bench_queue.py`` show that per-thread connections end with their threads
(the embedded API's threadpool retires idle threads and starts new ones, each with its own connection)."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path

__all__ = ["THREADS_PER_BURST", "burst", "open_fds_under"]

THREADS_PER_BURST = 20


def open_fds_under(directory: Path) -> int:
    """File descriptors of this process on files in ``directory`` (the .db, -wal and -shm files)."""
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # closed between listdir and readlink
            continue
        if target.startswith(str(directory) + os.sep):
            count += 1
    return count


def burst(call: Callable[[], object], threads: int = THREADS_PER_BURST) -> None:
    """``call`` once on each of ``threads`` new threads, all started before any ends, then joined."""
    gate = threading.Barrier(threads)
    errors: list[BaseException] = []

    def run() -> None:
        try:
            call()
            gate.wait(timeout=30)  # every thread holds its connection at once, as a busy pool does
        except BaseException as e:
            errors.append(e)

    workers = [threading.Thread(target=run) for _ in range(threads)]
    for t in workers:
        t.start()
    for t in workers:
        t.join(timeout=60)
    assert not errors, errors
    assert not any(t.is_alive() for t in workers)
