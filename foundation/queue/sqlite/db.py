"""One SQLite file shared by the threads and processes of one machine: connections and transactions.

Each thread has its own connection (the worker renews leases from a heartbeat thread), never shared
across ``fork``, and closed when its thread ends: the API's threadpool retires idle threads and starts
new ones, so connections kept past their thread would add up to one per thread the server ever ran.
Writes run in ``BEGIN IMMEDIATE`` (one writer at a time, across processes, waiting up
to ``busy_timeout``), in WAL mode so readers never block.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
import weakref
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


def _close_owned(conn: sqlite3.Connection, pid: int, inherited: list[sqlite3.Connection]) -> None:
    """Close ``conn`` in the process that opened it. A forked child (whose other threads' slots are
    cleared at the fork) keeps the parent's connections instead: closing one there could checkpoint
    or unlock the parent's file, and letting it be collected would close it all the same."""
    if os.getpid() == pid:
        conn.close()
    else:
        inherited.append(conn)


class _Held:
    """One thread's connection, owned by that thread's ``threading.local`` slot: the slot is cleared
    as the thread ends, which drops the last reference and runs ``closer``."""

    __slots__ = ("__weakref__", "closer", "conn", "pid")

    def __init__(self, conn: sqlite3.Connection, inherited: list[sqlite3.Connection]) -> None:
        self.conn, self.pid = conn, os.getpid()
        self.closer = weakref.finalize(self, _close_owned, conn, self.pid, inherited)


class SqliteFile:
    """Per-thread connections to ``path`` and the write transaction (``tx``)."""

    def __init__(self, path: str, *, synchronous: str) -> None:
        self._path = path
        # FULL: a commit survives power loss; NORMAL (WAL): it survives a process crash only.
        self._synchronous = synchronous
        self._local = threading.local()
        # Weak: a live thread's slot keeps its connection; ``close`` reaches every one through this.
        self._held: weakref.WeakSet[_Held] = weakref.WeakSet()
        self._held_lock = threading.Lock()
        self._inherited: list[sqlite3.Connection] = []  # see ``_close_owned``
        self._writer: tuple[int, threading.Lock] = (os.getpid(), threading.Lock())

    def conn(self) -> sqlite3.Connection:
        held: _Held | None = getattr(self._local, "held", None)
        if held is not None and held.pid == os.getpid():  # never share across fork
            return held.conn
        conn = sqlite3.connect(self._path, timeout=30.0, isolation_level=None, check_same_thread=False)
        conn.execute("PRAGMA busy_timeout=30000")
        _enable_wal(conn)
        conn.execute(f"PRAGMA synchronous={self._synchronous}")
        held = _Held(conn, self._inherited)
        with self._held_lock:
            self._held.add(held)
        self._local.held = held
        return conn

    def open_connections(self) -> int:
        """How many connections this process holds open now (one per live thread that used the file)."""
        with self._held_lock:
            return sum(1 for h in self._held if h.pid == os.getpid() and h.closer.alive)

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
                conn.execute("COMMIT")
            except BaseException:
                # A failed COMMIT (a deferred constraint, a full disk) leaves the transaction open: end it,
                # or every later write on this thread's connection would fail to BEGIN.
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise

    def close(self) -> None:
        """Close every thread's connection; a later call opens new ones."""
        with self._held_lock:
            held, self._held = list(self._held), weakref.WeakSet()
        for h in held:
            h.closer()  # runs once: a thread ending later finds its finalizer already spent
        self._local = threading.local()
