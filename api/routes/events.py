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

The queue's reads are sync calls; each tick runs them on a worker thread (``anyio.to_thread``, at
most ``_READ_THREADS`` at once), never on the event loop that serves every stream and poll.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import AsyncIterator, Callable
from typing import Annotated, Any

import anyio
from anyio import CapacityLimiter
from fastapi import APIRouter, Depends, Header, Path
from fastapi.responses import StreamingResponse
from starlette.types import Receive, Send
from starlette.types import Scope as Scope_

from api.auth import Principal, bearer
from api.context import ApiContext
from api.error_handlers import responses_for
from api.errors import ApiError
from api.event_stream import Cursor, StreamSlots, comment, is_terminal, merge, note_message, status_message
from api.keys import Scope
from api.query import only_query
from foundation.core.contract import Status, utcnow
from foundation.core.errors import ErrorCode
from foundation.queue.base import ApiQueue, Event, ProgressNote

__all__ = ["KEY_RECHECK_S", "build_router"]

# Queue reads of all streams of this process on threads at once: enough to overlap Redis round trips,
# few enough that a thousand streams do not become a thousand threads.
_READ_THREADS = 8
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


@dataclasses.dataclass
class _Reader:
    """One stream's position in its job's two logs, and what it has learned of the job so far."""

    queue: ApiQueue
    job_id: str
    cursor: Cursor
    status: Status | None = None  # of the last status event read; None before the first

    def read(self) -> list[Event | ProgressNote]:
        """The next batch, in order (a worker thread). Events first: a note read after them is never
        newer than an event not yet read, so the merge can place every note before its attempt's end.
        Notes only while the job may be running: a queued job has none to read."""
        events = self.queue.events(self.job_id, after=self.cursor.event or None, limit=_BATCH)
        notes: list[ProgressNote] = []
        if self.status in (None, Status.running) or any(e.status is Status.running for e in events):
            notes = self.queue.progress_notes(self.job_id, after=self.cursor.note or None, limit=_BATCH)
        return merge(events, notes)

    def closing_event(self) -> Event | None:
        """For a terminal job with nothing after the cursor (a worker thread): None when its log holds
        a terminal event (the client had it), else the record's terminal status as the last event."""
        log = self.queue.events(self.job_id, limit=_BATCH)
        if any(e.status in _TERMINAL for e in log):
            return None
        record = self.queue.get(self.job_id)
        if record is None or not record.terminal:
            return None
        at = record.updated_at or utcnow()
        return Event(job_id=record.id, status=record.status, attempt=record.attempt, at=at, id=self.cursor.event)


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


def build_router(ctx: ApiContext) -> APIRouter:
    router = APIRouter(prefix="/v1/generations", tags=["generations"])
    api = ctx.settings.api
    slots = StreamSlots(api.events_max_streams_per_key)
    readers = CapacityLimiter(_READ_THREADS)

    async def stream(
        reader: _Reader, record_ended: bool, first: list[Event | ProgressNote], api_key: str
    ) -> AsyncIterator[bytes]:
        yield comment("stream open")
        quiet_since = check_at = key_at = time.monotonic()
        batch: list[Event | ProgressNote] | None = first  # read before the answer started
        while True:
            if batch is None:
                batch = await anyio.to_thread.run_sync(reader.read, limiter=readers)
            for item in batch:
                if isinstance(item, ProgressNote):
                    reader.cursor = dataclasses.replace(reader.cursor, note=item.id)
                    yield note_message(item, reader.cursor, reader.job_id)
                    continue
                reader.cursor = dataclasses.replace(reader.cursor, event=item.id)
                reader.status = item.status
                yield status_message(item, reader.cursor, reader.job_id)
                if is_terminal(item):
                    return
            now = time.monotonic()
            if now - key_at >= KEY_RECHECK_S:
                key_at = now
                if not await ctx.auth.still_valid(api_key):
                    yield comment("the API key was revoked")
                    return
            read, batch = batch, None
            if read:
                quiet_since = now
                if len(read) >= _BATCH:
                    continue
            elif record_ended:
                # The record is terminal and nothing follows the cursor: either the client already
                # has the terminal event (a resume after it), or the log lost it (trimmed past its
                # cap): then the record's status closes the stream.
                closing = await anyio.to_thread.run_sync(reader.closing_event, limiter=readers)
                if closing is not None:
                    yield status_message(closing, reader.cursor, reader.job_id)
                return
            if now - quiet_since >= api.events_heartbeat_s:
                yield comment("heartbeat")
                quiet_since = now
            if not read and now - check_at >= api.events_heartbeat_s:
                # A quiet job: is it still there, and did it end without an event we can read?
                check_at = now
                polled = await ctx.aqueue.poll(reader.job_id)
                if polled is None:
                    return  # expired while we watched
                record_ended = polled.record.terminal
                if record_ended:
                    continue
            await anyio.sleep(api.events_poll_s)

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
    ) -> StreamingResponse:
        principal: Principal = await ctx.auth.authorize(api_key, Scope.generations_read)
        polled = await ctx.aqueue.poll(generation_id)
        # Another project's generation is "not found", not "forbidden": ids must not leak.
        if polled is None or polled.record.project != principal.project:
            raise ApiError(404, ErrorCode.not_found, f"no generation {generation_id!r}", "id")
        try:
            cursor = Cursor.parse(last_event_id, ctx.settings.queue.backend) if last_event_id else Cursor()
        except ValueError:
            raise _bad_last_event_id() from None
        if not slots.take(principal.key_id):
            raise ApiError(
                429,
                ErrorCode.too_many_streams,
                f"this API key already holds {slots.limit} open event streams; close one or poll",
                None,
                {"Retry-After": str(max(1, round(api.events_heartbeat_s)))},
            )
        reader = _Reader(ctx.queue, generation_id, cursor)
        try:
            first = await anyio.to_thread.run_sync(reader.read, limiter=readers)  # fails here, not mid-stream
        except ValueError:  # the backend's word for a cursor it cannot read after
            slots.give_back(principal.key_id)
            raise _bad_last_event_id() from None
        except BaseException:
            slots.give_back(principal.key_id)
            raise
        headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
        return _SlotResponse(
            stream(reader, polled.record.terminal, first, api_key),
            media_type="text/event-stream",
            headers=headers,
            release=lambda: slots.give_back(principal.key_id),
        )

    return router
