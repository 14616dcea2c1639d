"""A project's listing, one page at a time, over the records a backend hands it in order.

Both backends list the same way (``page_of``): they walk the project's jobs in the listing's order from
the cursor on, each with its position and a way to read its record, and this module makes the page. A
record this version cannot read (``records.read`` raises: a newer version's during a rolling upgrade, or
text that is no record) is left out and counted in ``JobPage.skipped``: one such record never costs the
whole listing, and the cursor moves past it like past any other, so each is counted on exactly one page.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from foundation.core.contract import GenerationRecord
from foundation.queue.base import JobPage, cursor_at
from foundation.queue.errors import UnreadableRecord

__all__ = ["SKIPPED_MAX", "Listed", "page_of"]

# Unreadable records one page steps over at most: past it the page ends (with a cursor) even if it holds
# fewer than ``limit`` records, so a listing's cost stays bounded whatever a project has stored.
SKIPPED_MAX = 1000


@dataclass(frozen=True)
class Listed:
    """One job of the listing, in order: its position (created ms, id) and its record, read on demand
    (None: gone since it was listed; ``UnreadableRecord``: this version cannot read it)."""

    created_ms: float
    job_id: str
    read: Callable[[], GenerationRecord | None]


def page_of(listed: Iterable[Listed], limit: int) -> JobPage:
    """Up to ``limit`` readable records from ``listed``; the cursor after the last job the page stepped
    over (readable or not) when any job follows it, else None."""
    records: list[GenerationRecord] = []
    skipped = 0
    last: Listed | None = None
    for job in listed:
        if last is not None and (len(records) >= limit or skipped >= SKIPPED_MAX):
            return JobPage(records, cursor_at(last.created_ms, last.job_id), skipped)
        try:
            record = job.read()
        except UnreadableRecord:
            skipped += 1
        else:
            if record is not None:  # else gone since it was listed (deleted, or a crashed enqueue's index)
                records.append(record)
        last = job
    return JobPage(records, None, skipped)
