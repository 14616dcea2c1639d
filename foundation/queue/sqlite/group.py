"""Group commit: writes from concurrent threads of one process share a transaction, and so its fsync.

With ``synchronous=FULL`` every commit waits for the disk (about a millisecond here), so one writer at
a time cannot pass about a thousand commits a second whatever it writes. ``GroupCommit.run`` queues
one write and returns its result once a transaction holding it has committed: the first caller to
find no transaction in progress writes everything queued until then (up to ``max_batch``), each
write in a savepoint of its own, and commits once; callers that queued meanwhile find their result
ready or write the next batch. Alone, a caller writes its own transaction at once: nothing waits for
a batch to fill.

A write that raises is rolled back to its savepoint and its caller gets the exception; the others in
the batch commit. When the transaction itself fails (BEGIN or COMMIT), nothing of the batch was
written and every caller in it gets that exception. A caller is answered only after the commit, so a
result it returns is as durable as a write of its own transaction would have been.

Not shared (``shared=False``, the default of ``queue.sqlite_group_commit``), each caller commits its own
writes, with the same savepoints: the reference the shared path's tests compare against.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Callable
from typing import Generic, TypeVar

from foundation.queue.sqlite.db import SqliteFile

__all__ = ["GroupCommit"]

T = TypeVar("T")
R = TypeVar("R")

# Writes per transaction at most: a bound on how long the writes queued behind a batch wait for it.
MAX_BATCH = 64


class _Ticket(Generic[T, R]):
    __slots__ = ("done", "error", "item", "result")

    def __init__(self, item: T) -> None:
        self.item = item
        self.done = False
        self.result: R | None = None
        self.error: BaseException | None = None


class GroupCommit(Generic[T, R]):
    """``run(item)`` = ``write(conn, item)`` in a transaction on ``db``, batched with concurrent runs."""

    def __init__(
        self,
        db: SqliteFile,
        write: Callable[[sqlite3.Connection, T], R],
        *,
        max_batch: int = MAX_BATCH,
        shared: bool = True,
    ) -> None:
        self._db = db
        self._write = write
        self._max_batch = max_batch
        self._shared = shared
        self._reset()

    def _reset(self) -> None:
        self._pid = os.getpid()
        self._pending: list[_Ticket[T, R]] = []
        self._queue_lock = threading.Lock()  # guards ``_pending``
        self._writer = threading.Lock()  # held by the caller writing a batch

    def run(self, item: T) -> R:
        (ticket,) = self._run([item])
        if ticket.error is not None:
            raise ticket.error
        return ticket.result  # type: ignore[return-value]  # set for every ticket done without an error

    def run_many(self, items: list[T]) -> list[R | Exception]:
        """``run`` for each item, queued together: each one's result, or the exception its write raised.
        An exception that is no ``Exception`` (KeyboardInterrupt...) is raised."""
        outcomes: list[R | Exception] = []
        for ticket in self._run(items):
            if ticket.error is None:
                outcomes.append(ticket.result)  # type: ignore[arg-type]  # set: done without an error
            elif isinstance(ticket.error, Exception):
                outcomes.append(ticket.error)
            else:
                raise ticket.error
        return outcomes

    def _run(self, items: list[T]) -> list[_Ticket[T, R]]:
        tickets: list[_Ticket[T, R]] = [_Ticket(item) for item in items]
        if not self._shared:  # this caller's writes alone, in transactions of their own
            for start in range(0, len(tickets), self._max_batch):
                self._commit(tickets[start : start + self._max_batch])
            return tickets
        if self._pid != os.getpid():  # a forked child: the parent's locks may be held, its queue is not ours
            self._reset()
        with self._queue_lock:
            self._pending.extend(tickets)
        with self._writer:
            while not tickets[-1].done:  # the batches before its last may be full: write them, then its own
                with self._queue_lock:
                    batch = self._pending[: self._max_batch]
                    del self._pending[: self._max_batch]
                self._commit(batch)
        return tickets

    def _commit(self, batch: list[_Ticket[T, R]]) -> None:
        try:
            with self._db.tx() as conn:
                for ticket in batch:
                    conn.execute("SAVEPOINT one_write")
                    try:
                        ticket.result = self._write(conn, ticket.item)
                    except Exception as e:
                        conn.execute("ROLLBACK TO one_write")
                        ticket.error = e
                    conn.execute("RELEASE one_write")
        except BaseException as e:  # nothing of the batch was committed: every caller in it learns why
            for ticket in batch:
                ticket.result, ticket.error = None, e
            if not isinstance(e, Exception):
                raise  # KeyboardInterrupt and the like stop this caller too
        finally:
            for ticket in batch:
                ticket.done = True
