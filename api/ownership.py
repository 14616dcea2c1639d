"""A project's own record, read for a route: another project's id is "not found", never "forbidden", so
ids do not leak; a record this version cannot read is answered as ``api.errors.unreadable_record_error``
says. Shared by ``/v1/generations`` and ``/v1/videos``, which differ only in how they say "not found"."""

from __future__ import annotations

from api.auth import Principal
from api.context import ApiContext
from api.errors import ApiError, unreadable_record_error
from foundation.core.contract import GenerationRecord
from foundation.queue.base import Polled
from foundation.queue.errors import UnreadableRecord

__all__ = ["owned_polled", "owned_record"]


async def owned_record(ctx: ApiContext, job_id: str, principal: Principal, not_found: ApiError) -> GenerationRecord:
    """The principal's project's record ``job_id``; ``not_found`` when there is none of its own."""
    try:
        record = await ctx.queue.get(job_id)
    except UnreadableRecord as e:  # a newer version's (503), or one no version reads (410)
        raise unreadable_record_error(e, principal.project, not_found) from None
    if record is None or record.project != principal.project:
        raise not_found
    return record


async def owned_polled(ctx: ApiContext, job_id: str, principal: Principal, not_found: ApiError) -> Polled:
    """``owned_record`` with the job's place in the queue (one ``poll``)."""
    try:
        polled = await ctx.queue.poll(job_id)
    except UnreadableRecord as e:  # a newer version's (503), or one no version reads (410)
        raise unreadable_record_error(e, principal.project, not_found) from None
    if polled is None or polled.record.project != principal.project:
        raise not_found
    return polled
