"""Records written by a newer version, as a worker's queue meets them: what it tells the worker.

During a rolling upgrade (or after a rollback) a worker meets jobs whose record format is newer than its
own (``records.NewerRecord``). It leaves them to the newer workers and, past ``queue.newer_record_wait_s``,
fails them; each such meeting is noted here and handed to the worker by ``WorkerQueue.newer_records``,
which logs it and counts ``genworker_newer_records_total``. A job is noted once while it is left (the
claim path, every reaper pass and the sweep may all meet it) and once when it fails.
"""

from __future__ import annotations

import threading

from foundation.queue.base import NewerRecordMet

__all__ = ["NewerNotes"]

_NOTES_MAX = 1000  # notes not yet taken by the worker; past it the oldest go
_SEEN_MAX = 16_000  # jobs remembered as noted; past it a job may be noted once more (one more log line)


class NewerNotes:
    """Newer versions' records met, for ``WorkerQueue.newer_records``: each job once while it is left
    (the claim, the reaper and the sweep all meet it, the reaper at every pass) and once when it fails."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._notes: list[NewerRecordMet] = []
        self._seen: set[tuple[str, bool]] = set()

    def note(self, model: str, job_id: str, record_format: int, *, failed: bool, waited_s: float) -> None:
        with self._lock:
            if (job_id, failed) in self._seen:
                return
            if len(self._seen) >= _SEEN_MAX:
                self._seen.clear()  # a job noted again after this costs one more log line, nothing else
            self._seen.add((job_id, failed))
            met = NewerRecordMet(job_id, model, record_format, failed, round(waited_s, 3))
            self._notes = [*self._notes[-(_NOTES_MAX - 1) :], met]

    def take(self) -> list[NewerRecordMet]:
        with self._lock:
            notes, self._notes = self._notes, []
        return notes
