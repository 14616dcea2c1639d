"""``GET /v1/generations/{id}/events``: a generation's status and progress, live, as Server-Sent Events.

A compatible v1 addition on top of the polling contract (which stays the source of truth): the same
read scope and project isolation as ``GET /v1/generations/{id}`` (another project's id is the same
404), then ``event: status`` and ``event: progress`` messages (and ``event: preview``, a live picture of
the latents, with the progress write that carried it) replayed from the queue's durable
per-job logs (``api/event_stream.py``) from the start of the job, or from ``Last-Event-ID`` on a
reconnect, until the terminal status event, after which the server closes the stream. A comment line
every ``api.events_heartbeat_s`` while nothing happens. One API key holds at most
``api.events_max_streams_per_key`` streams per process (429 ``too_many_streams`` past it).

Checked before the 200, so a stream never starts only to break: a ``Last-Event-ID`` this backend never
sent is a 400 ``invalid_parameter``, and the first read from the queue is made before the answer's
status line (a failure there is the answer's own error: 503 for a queue that cannot answer). While open,
the stream asks every ``KEY_RECHECK_S`` whether its key is still active (the key cache's bound on top):
a revoked key's stream ends within a few seconds, as its polls would.

The queue's reads are awaited on the API's async queue (``ApiContext.queue``), which keeps them off
the event loop that serves every stream and poll.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import AsyncIterator, Callable
from typing import Annotated, Any

import anyio
from fastapi import APIRouter, Depends, Header, Path
from fastapi.responses import StreamingResponse
from starlette.types import Receive, Send
from starlette.types import Scope as Scope_

from api.api_keys import Scope
from api.auth import Principal, bearer
from api.context import ApiContext, context
from api.error_handlers import responses_for
from api.errors import ApiError
from api.event_stream import Cursor, comment, is_terminal, merge, note_message, status_message
from api.ownership import owned_polled
from api.query import only_query
from foundation.core.contract import Status, utcnow
from foundation.core.errors import ErrorCode
from foundation.queue.base import AsyncApiQueue, Event, ProgressNote
from foundation.queue.errors import UnreadableRecord

__all__ = ["KEY_RECHECK_S", "router"]

_BATCH = 1000  # items per log and read; a full batch is followed by the next read at once
_TERMINAL = frozenset({Status.succeeded, Status.failed, Status.canceled})
# How often an open stream asks whether its key is still active; with the key cache's own bound
# (``api.auth.KEY_CACHE_TTL_S``) this is how long a revoked key's stream may outlive the revocation.
KEY_RECHECK_S = 2.0

_STREAM_RESPONSE: dict[int | str, dict[str, Any]] = {
    200: {
        "description": (
            "`text/event-stream`: `event: status` and `event: progress` messages, each with an `id:` "
            "to resume from (`Last-Event-ID`); the stream ends after the terminal status."
        ),
        "content": {"text/event-stream": {"schema": {"type": "string"}}},
    }
}

Item = Event | ProgressNote


@dataclasses.dataclass
class _Reader:
    """One stream's position in its job's two logs, and what it has learned of the job so far."""

    queue: AsyncApiQueue
    job_id: str
    cursor: Cursor
    status: Status | None = None  # of the last status event read; None before the first

    async def read(self) -> list[Item]:
        """The next batch, in order. Events first: a note read after them is never newer than an event
        not yet read, so the merge can place every note before its attempt's end. Notes only while the
        job may be running: a queued job has none to read."""
        events = await self.queue.events(self.job_id, after=self.cursor.event or None, limit=_BATCH)
        notes: list[ProgressNote] = []
        if self.status in (None, Status.running) or any(e.status is Status.running for e in events):
            notes = await self.queue.progress_notes(self.job_id, after=self.cursor.note or None, limit=_BATCH)
        return merge(events, notes)

    def message(self, item: Item) -> bytes:
        """``item`` as its Server-Sent Event; the cursor moves past it."""
        if isinstance(item, ProgressNote):
            self.cursor = dataclasses.replace(self.cursor, note=item.id)
            return note_message(item, self.cursor, self.job_id)
        self.cursor = dataclasses.replace(self.cursor, event=item.id)
        self.status = item.status
        return status_message(item, self.cursor, self.job_id)

    async def closing_event(self) -> Event | None:
        """For a terminal job with nothing after the cursor: None when its log holds a terminal event
        (the client had it), else the record's terminal status as the last event."""
        log = await self.queue.events(self.job_id, limit=_BATCH)
        if any(e.status in _TERMINAL for e in log):
            return None
        try:
            record = await self.queue.get(self.job_id)
        except UnreadableRecord:  # rewritten by a newer version meanwhile: the log's events are all we have
            return None
        if record is None or not record.terminal:
            return None
        at = record.updated_at or utcnow()
        return Event(job_id=record.id, status=record.status, attempt=record.attempt, at=at, id=self.cursor.event)


@dataclasses.dataclass
class _Stream:
    """One open stream: its reader, and when it last sent something, checked its job and its key."""

    ctx: ApiContext
    reader: _Reader
    api_key: str
    record_ended: bool
    quiet_since: float = 0.0
    check_at: float = 0.0
    key_at: float = 0.0

    async def messages(self, first: list[Item]) -> AsyncIterator[bytes]:
        """The stream's body: ``first`` (read before the answer started), then each new batch, until the
        terminal event, the job's expiry or the key's revocation."""
        api = self.ctx.settings.api
        yield comment("stream open")
        self.quiet_since = self.check_at = self.key_at = time.monotonic()
        batch: list[Item] | None = first
        while True:
            if batch is None:
                batch = await self.reader.read()
            for item in batch:
                yield self.reader.message(item)
                if is_terminal(item):
                    return
            now = time.monotonic()
            if not await self._key_still_valid(now):
                yield comment("the API key was revoked")
                return
            if batch:
                self.quiet_since = now
                if len(batch) >= _BATCH:
                    batch = None
                    continue
            elif self.record_ended:
                # The record is terminal and nothing follows the cursor: either the client already has
                # the terminal event (a resume after it), or the log lost it (trimmed past its cap):
                # then the record's status closes the stream.
                closing = await self.reader.closing_event()
                if closing is not None:
                    yield status_message(closing, self.reader.cursor, self.reader.job_id)
                return
            if now - self.quiet_since >= api.events_heartbeat_s:
                yield comment("heartbeat")
                self.quiet_since = now
            if not batch and now - self.check_at >= api.events_heartbeat_s:
                self.check_at = now
                if not await self._job_still_there():
                    return  # expired (or no longer readable by this version) while we watched
                if self.record_ended:
                    batch = None
                    continue
            batch = None
            await anyio.sleep(api.events_poll_s)

    async def _key_still_valid(self, now: float) -> bool:
        if now - self.key_at < KEY_RECHECK_S:
            return True
        self.key_at = now
        return await self.ctx.auth.still_valid(self.api_key)

    async def _job_still_there(self) -> bool:
        """A quiet job: is it still there, and did it end without an event we can read?"""
        try:
            polled = await self.ctx.queue.poll(self.reader.job_id)
        except UnreadableRecord:
            # Rewritten by a newer version (a rollout) or spoiled: the stream ends, and the client's
            # reconnect (Last-Event-ID) gets the coded answer, or a newer replica's stream.
            return False
        if polled is None:
            return False
        self.record_ended = polled.record.terminal
        return True


class _SlotResponse(StreamingResponse):
    """A stream that gives its key's slot back when the response ends, however it ends (the
    terminal event, the client gone, the server stopping), even if its body never started."""

    def __init__(self, content: AsyncIterator[bytes], *, release: Callable[[], None], **kwargs: Any) -> None:
        super().__init__(content, **kwargs)
        self._release = release

    async def __call__(self, scope: Scope_, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._release()


def _bad_last_event_id() -> ApiError:
    return ApiError(400, ErrorCode.invalid_parameter, "Last-Event-ID is not an id of this stream", "Last-Event-ID")


def _too_many_streams(ctx: ApiContext) -> ApiError:
    return ApiError(
        429,
        ErrorCode.too_many_streams,
        f"this API key already holds {ctx.streams.limit} open event streams; close one or poll",
        None,
        {"Retry-After": str(max(1, round(ctx.settings.api.events_heartbeat_s)))},
    )


async def _first_read(ctx: ApiContext, principal: Principal, reader: _Reader) -> list[Item]:
    """Take a stream slot of the key and read the first batch, before the answer starts: a failure is
    the answer's own error, never a stream that breaks. The slot is given back when this fails."""
    if not ctx.streams.take(principal.key_id):
        raise _too_many_streams(ctx)
    try:
        return await reader.read()
    except ValueError:  # the backend's word for a cursor it cannot read after
        ctx.streams.give_back(principal.key_id)
        raise _bad_last_event_id() from None
    except BaseException:
        ctx.streams.give_back(principal.key_id)
        raise


router = APIRouter(prefix="/v1/generations", tags=["generations"])
_CONTEXT = Depends(context)


@router.get(
    "/{generation_id}/events",
    dependencies=[only_query()],
    response_class=StreamingResponse,
    summary="Follow a generation live (Server-Sent Events) until it ends",
    responses={**responses_for(401, 403, 404, 429), **_STREAM_RESPONSE},
)
async def generation_events(
    generation_id: Annotated[str, Path(min_length=1, max_length=128, description="Generation id.")],
    api_key: str = Depends(bearer),
    last_event_id: Annotated[
        str | None, Header(max_length=512, description="Resume after this event (the `id:` of the last one read).")
    ] = None,
    ctx: ApiContext = _CONTEXT,
) -> StreamingResponse:
    principal = await ctx.auth.authorize(api_key, Scope.generations_read)
    # Another project's generation is "not found", not "forbidden": ids must not leak. A record this
    # version cannot read is answered as GET /v1/generations/{id} answers it (503 or 410, coded).
    not_found = ApiError(404, ErrorCode.not_found, f"no generation {generation_id!r}", "id")
    polled = await owned_polled(ctx, generation_id, principal, not_found)
    try:
        cursor = Cursor.parse(last_event_id, ctx.settings.queue.backend) if last_event_id else Cursor()
    except ValueError:
        raise _bad_last_event_id() from None
    reader = _Reader(ctx.queue, generation_id, cursor)
    first = await _first_read(ctx, principal, reader)
    stream = _Stream(ctx, reader, api_key, record_ended=polled.record.terminal)
    return _SlotResponse(
        stream.messages(first),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        release=lambda: ctx.streams.give_back(principal.key_id),
    )
