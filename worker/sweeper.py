"""The sweeper: what a killed worker or an expired record leaves behind, removed at start and periodically.

Each pass (``Sweeper.sweep``), in its own thread so it never delays a claim:

1. **Queue retention** (``WorkerQueue.purge_expired``): records and events past ``record_ttl``,
   idempotency keys past 24 h, events and dead letters past their caps, consumers of stopped workers.
2. **Work dirs** under ``<data_dir>/work`` (``<job id>-<attempt>-<random>``, one per attempt being
   encoded) older than ``min_age_s`` whose attempt is no longer running: its worker was killed.
3. **Artifact objects** (``generations/<id>/<attempt>-<claim>/<file>``, the local store's unfinished
   ``.part`` files among them) older than ``min_age_s`` that no record will point at, input images
   (``generations/<id>/input/<file>``, stored by the API at create) whose record is gone, and denoising
   checkpoints (``generations/<id>/checkpoint/<file>``) of generations that ended or are gone.

What is never removed, whatever its age: anything the record lists in ``artifacts``, and every
object and work dir of the attempt a non-terminal record is at (the claim tag is not on the record, so
every claim of the current attempt is kept: an in-flight upload is always among them). What goes:

========================================  =============================================================
the record                                an object (or work dir) older than ``min_age_s`` is removed when
========================================  =============================================================
missing (expired, or never written)       always
terminal                                  the record's ``artifacts`` do not list it (a stale attempt's, a
                                          refused finish's, one that failed its post-upload check)
queued or running at attempt N            its attempt is below N (a lapsed or failed-over claim)
unreadable, or the queue cannot answer    never (the next pass looks again)
========================================  =============================================================

``min_age_s`` must exceed the longest upload → finish gap (a lease TTL is ample): a missing record is
judged only by age. The store must belong to this queue alone: an object of a job another queue holds
looks orphaned here.
"""

from __future__ import annotations

import logging
import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path

from foundation.core.contract import GenerationRecord, Status
from foundation.core.errors import BackendUnavailable
from foundation.queue.base import WorkerQueue
from foundation.stores.base import ARTIFACTS_ROOT, ArtifactStore

__all__ = ["SweepReport", "Sweeper", "SweeperThread"]

log = logging.getLogger("genworker.sweeper")


class _Unreadable:
    """A record this version cannot read: everything of its job is kept."""


_UNREADABLE = _Unreadable()


@dataclass(frozen=True)
class SweepReport:
    purged: int  # queue items (records, events, keys, consumers) removed by the queue's retention
    work_dirs: int
    objects: int


@dataclass(frozen=True)
class _Tag:
    """Which job and attempt an artifact key or a work dir belongs to."""

    job_id: str
    attempt: int


# The attempt of an input image's tag (``generations/<id>/input/<file>``): it belongs to every attempt, so it
# stays as long as its record does (retries read it) and goes with it (expired, or a create never enqueued).
_INPUT_ATTEMPT = -1
# The attempt of a denoising checkpoint's tag: any attempt may resume from it, so it stays while the record
# is not terminal (the worker deletes it when the generation ends; this catches what a killed one left).
_CHECKPOINT_ATTEMPT = -2


def _object_tag(key: str) -> _Tag | None:
    """``generations/<id>/<attempt>-<claim>/<file>`` (ids may hold '/'), or an input image; None for any
    other key."""
    parts = key.removeprefix(ARTIFACTS_ROOT).split("/")
    if len(parts) < 3 or not all(parts):
        return None
    if parts[-2] == "input":
        return _Tag("/".join(parts[:-2]), _INPUT_ATTEMPT)
    if parts[-2] == "checkpoint":
        return _Tag("/".join(parts[:-2]), _CHECKPOINT_ATTEMPT)
    attempt, sep, claim = parts[-2].partition("-")
    if not sep or not attempt.isdigit() or not claim:
        return None
    return _Tag("/".join(parts[:-2]), int(attempt))


def _work_dir_tag(name: str) -> _Tag | None:
    """``<id>-<attempt>-<random>`` as the runner's ``mkdtemp`` names it; None for anything else."""
    job_id, attempt, rest = [*name.rsplit("-", 2), "", ""][:3]
    if not job_id or not attempt.isdigit() or not rest:
        return None
    return _Tag(job_id, int(attempt))


def _keeps(record: GenerationRecord | None, tag: _Tag, key: str | None = None) -> bool:
    """Whether an old object (``key``) or work dir (``key`` None) of ``tag`` must stay (table above)."""
    if record is None:
        return False
    if tag.attempt == _INPUT_ATTEMPT:
        return True
    if tag.attempt == _CHECKPOINT_ATTEMPT:
        return not record.terminal
    if record.terminal:
        return key is not None and any(a.key == key for a in record.artifacts)
    if key is None and record.status is not Status.running:
        return False  # a work dir is only in use while its attempt runs
    return tag.attempt >= record.attempt


class Sweeper:
    def __init__(
        self,
        queue: WorkerQueue,
        store: ArtifactStore | None,
        work_root: Path,
        *,
        min_age_s: float,
        now: Callable[[], float] = time.time,
    ) -> None:
        self._queue = queue
        self._store = store  # None: objects are not swept by this worker
        self._work_root = work_root
        self.min_age_s = min_age_s
        self._now = now

    def sweep(self) -> SweepReport:
        """One pass; the queue being unreachable ends it early (the next pass tries again)."""
        purged = work_dirs = objects = 0
        try:
            purged = self._queue.purge_expired()
            work_dirs = self.sweep_work_dirs()
            objects = self.sweep_objects() if self._store is not None else 0
        except BackendUnavailable as e:
            log.warning("sweep stopped: queue unavailable: %s", e)
        return SweepReport(purged=purged, work_dirs=work_dirs, objects=objects)

    def _record(self, job_id: str) -> GenerationRecord | _Unreadable | None:
        try:
            return self._queue.get(job_id)
        except BackendUnavailable:
            raise
        except Exception as e:  # a record this version cannot read: keep its files, say why
            log.warning("sweep keeps the files of an unreadable record", extra={"job_id": job_id, "error": str(e)})
            return _UNREADABLE

    def sweep_work_dirs(self) -> int:
        removed = 0
        cutoff = self._now() - self.min_age_s
        try:
            entries = sorted(self._work_root.iterdir())
        except FileNotFoundError:
            return 0
        for path in entries:
            tag = _work_dir_tag(path.name)
            try:
                old = path.is_dir() and path.stat().st_mtime < cutoff
            except FileNotFoundError:
                continue
            if tag is None or not old:
                continue
            record = self._record(tag.job_id)
            if isinstance(record, _Unreadable) or _keeps(record, tag):
                continue
            shutil.rmtree(path, ignore_errors=True)
            removed += 1
            log.info("swept work dir", extra={"job_id": tag.job_id, "path": str(path)})
        return removed

    def sweep_objects(self) -> int:
        assert self._store is not None
        removed = 0
        cutoff = datetime.fromtimestamp(self._now() - self.min_age_s, UTC)
        records: dict[str, GenerationRecord | _Unreadable | None] = {}
        for listed in self._store.list_objects(ARTIFACTS_ROOT):
            tag = _object_tag(listed.key)
            if tag is None or listed.modified_at >= cutoff:
                continue
            if tag.job_id not in records:
                if len(records) > 1000:  # listings come grouped by job: a small memo suffices
                    records.clear()
                records[tag.job_id] = self._record(tag.job_id)
            record = records[tag.job_id]
            if isinstance(record, _Unreadable) or _keeps(record, tag, listed.key):
                continue
            self._store.delete(listed.key)
            removed += 1
            log.info("swept object", extra={"job_id": tag.job_id, "key": listed.key})
        return removed


class SweeperThread(threading.Thread):
    """Runs ``Sweeper.sweep`` once at start, then every ``interval_s`` until ``stop``."""

    def __init__(self, sweeper: Sweeper, interval_s: float) -> None:
        super().__init__(name="sweeper", daemon=True)
        self.sweeper = sweeper
        self.interval_s = interval_s
        self._stop_event = threading.Event()

    def run(self) -> None:
        while True:
            started = time.perf_counter()
            try:
                report = self.sweeper.sweep()
                elapsed_ms = round((time.perf_counter() - started) * 1000)
                log.info("sweep done", extra={**asdict(report), "elapsed_ms": elapsed_ms})
            except Exception as e:
                # Kept broad on purpose: a failing pass (a store outage, a bug) must not end the thread.
                log.error("sweep failed: %s", e, extra={"error": type(e).__name__}, exc_info=e)
            if self._stop_event.wait(self.interval_s):
                return

    def stop(self) -> None:
        self._stop_event.set()
