"""The queue's own exceptions; what a backend cannot reach is ``foundation.core.errors.BackendUnavailable``.

Exception tree (the classes of this module, under their bases from ``foundation.core.errors``)::

    GenworkerError
    ├── StoredDataError
    │   ├── UnreadableRecord     a stored record this version cannot read (also ``ValueError``)
    │   │   └── NewerRecord      one a newer version wrote (its record format is above this version's)
    │   └── UnreadableEntry      a stream entry that is no job pointer (also ``ValueError``)
    ├── RequestError
    │   └── ProjectQueueFull     a create past its project's ``max_queued`` in the pool: nothing enqueued
    └── TransientError
        └── BackendUnavailable
            └── NotDurable       a commit the replicas (or AOF) did not confirm in time
"""

from __future__ import annotations

from foundation.core.errors import BackendUnavailable, RequestError, StoredDataError

__all__ = ["NewerRecord", "NotDurable", "ProjectQueueFull", "UnreadableEntry", "UnreadableRecord"]


class UnreadableRecord(StoredDataError, ValueError):
    """A stored record this version cannot read (e.g. a status value a newer version wrote during a
    rolling upgrade). The reader sets that one record aside as a dead letter and goes on with the rest.
    ``project``: the project stored beside the record, when the reader knows it (the API's reads), so the
    caller can tell whose it is without reading it."""

    def __init__(self, raw: str, detail: str, *, project: str | None = None) -> None:
        super().__init__(detail)
        self.raw = raw
        self.detail = detail
        self.project = project


class NewerRecord(UnreadableRecord):
    """A record written in a newer record format than this version's (``records.RECORD_FORMAT``), during a
    rolling upgrade or after a rollback: not this version's to read or run, whether its text parses or not.
    Workers leave it to newer ones without using an attempt (``queue.newer_record_wait_s``); one that no
    newer worker takes in that time fails ``version_unavailable``."""

    def __init__(self, raw: str, record_format: int, readable: int, *, project: str | None = None) -> None:
        detail = f"record format {record_format}, newer than the {readable} this version reads"
        super().__init__(raw, detail, project=project)
        self.record_format = record_format


class UnreadableEntry(StoredDataError, ValueError):
    """A stream entry that is not a valid job pointer; ``reason`` goes into the dead letter."""

    def __init__(self, reason: str, job_id: str = "") -> None:
        super().__init__(reason)
        self.reason = reason
        self.job_id = job_id


class ProjectQueueFull(RequestError):
    """A create refused because its project already has ``max_queued`` jobs waiting in the model's pool
    (``queue.fair``); nothing was enqueued and no idempotency key kept, so the same create may come back
    once room frees up. The API answers 429 ``queue_full`` with ``Retry-After``."""

    def __init__(self, project: str, model: str, max_queued: int) -> None:
        super().__init__(f"project {project} has {max_queued} jobs waiting for {model} (queue.fair max_queued)")
        self.project = project
        self.model = model
        self.max_queued = max_queued


class NotDurable(BackendUnavailable):
    """A commit took effect on the primary but was not confirmed by the replicas (or AOF) in time."""
