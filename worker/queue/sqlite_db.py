"""One SQLite file shared by the threads and processes of one machine: connections and transactions.

Each thread has its own connection (the worker renews leases from a heartbeat thread), never shared
across ``fork``. Writes run in ``BEGIN IMMEDIATE`` (one writer at a time, across processes, waiting up
to ``busy_timeout``), in WAL mode so readers never block.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["SqliteFile"]


def _enable_wal(conn: sqlite3.Connection, *, deadline_s: float = 30.0) -> None:
    """Switch to WAL, retrying while other connections hold the file.

    Changing the journal mode needs the database to itself and SQLite answers SQLITE_BUSY at once,
    without calling the busy handler, so connections opened together (processes starting at once)
    must retry. Once the file is in WAL mode (it persists) the pragma is a cheap no-op.
    """
    give_up = time.monotonic() + deadline_s
    while True:
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as e:
            if "locked" not in str(e) or time.monotonic() > give_up:
                raise
            time.sleep(0.02)


class SqliteFile:
    """Per-thread connections to ``path`` and the write transaction (``tx``)."""

    def __init__(self, path: str, *, synchronous: str) -> None:
        self._path = path
        # FULL: a commit survives power loss; NORMAL (WAL): it survives a process crash only.
        self._synchronous = synchronous
        self._local = threading.local()
        self._all: list[sqlite3.Connection] = []
        self._all_lock = threading.Lock()
        self._writer: tuple[int, threading.Lock] = (os.getpid(), threading.Lock())

    def conn(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None or getattr(self._local, "pid", None) != os.getpid():  # never share across fork
            conn = sqlite3.connect(self._path, timeout=30.0, isolation_level=None, check_same_thread=False)
            conn.execute("PRAGMA busy_timeout=30000")
            _enable_wal(conn)
            conn.execute(f"PRAGMA synchronous={self._synchronous}")
            self._local.conn, self._local.pid = conn, os.getpid()
            with self._all_lock:
                self._all.append(conn)
        return conn

    def _write_lock(self) -> threading.Lock:
        pid, _ = self._writer
        if pid != os.getpid():  # a forked child gets a fresh lock (the parent's may be held)
            self._writer = (os.getpid(), threading.Lock())
        return self._writer[1]

    @contextmanager
    def tx(self) -> Iterator[sqlite3.Connection]:
        # Threads of this process take turns on a lock before BEGIN IMMEDIATE: a waiter is woken the
        # moment the writer before it commits, where SQLite's busy handler would poll with sleeps of up
        # to 100 ms (under a burst of API writes that made POST p99 ~1 s). Other processes still wait
        # through busy_timeout.
        with self._write_lock():
            conn = self.conn()
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")

    def close(self) -> None:
        """Close every thread's connection; a later call opens new ones."""
        with self._all_lock:
            conns, self._all = self._all, []
        for conn in conns:
            conn.close()
        self._local = threading.local()
