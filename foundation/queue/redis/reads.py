"""The read side of the Redis backend: records, listings, depth, position, events, dead letters and
worker heartbeats. Nothing here changes a job; ``redis_backend.RedisQueue`` holds one and answers
these calls through it. Every public method translates "Redis unreachable" (``unavailable``)."""

from __future__ import annotations

import functools
import threading
from collections.abc import Iterator
from datetime import datetime
from typing import Any

from foundation.core.contract import GenerationRecord, Stage, Status
from foundation.core.media import Preview
from foundation.queue import keys, records
from foundation.queue.base import DeadLetter, Event, JobPage, ProgressNote, WorkerHeartbeat, read_list_cursor
from foundation.queue.listing import Listed, page_of
from foundation.queue.redis.scripts import Scripts
from foundation.queue.unavailable import redis_unavailable

__all__ = ["RedisReads"]


def _stream_id(value: str) -> tuple[int, int]:
    ms, _, seq = value.partition("-")
    return int(ms), int(seq or 0)


def _checked_stream_id(value: str) -> str:
    """A stream id as Redis reads it (``ValueError`` otherwise): a cursor from a client is not trusted."""
    ms, seq = _stream_id(value)
    return f"{ms}-{seq}"


def _event_cursor(value: str) -> tuple[tuple[int, int], str]:
    """``Event.id`` is ``<stream id>/<model>``: stream ids of two models can be equal, the pair is not."""
    sid, _, model = value.partition("/")
    return _stream_id(sid), model


class RedisReads:
    def __init__(self, client: Any, scripts: Scripts) -> None:
        self._r = client
        self._scripts = scripts
        self._model_cache: dict[str, str] = {}
        self._cache_lock = threading.Lock()

    # ----------------------------------------------------------------------------------- records
    @redis_unavailable
    def get(self, job_id: str) -> GenerationRecord | None:
        """``records.read`` of the job's record, in the format stored beside it (``NewerRecord``,
        ``UnreadableRecord`` name the project stored on the job hash)."""
        model = self.model_of(job_id)
        if model is None:
            return None
        raw, fmt, project = self._r.hmget(keys.job_record(model, job_id), "record", "format", "project")
        if raw is None:
            return None
        return records.read(raw, records.record_format(fmt), project=project, readable=self._scripts.record_format)

    @redis_unavailable
    def list_page(
        self, project: str, *, limit: int = 20, cursor: str | None = None, oldest_first: bool = False
    ) -> JobPage:
        """Newest first (or oldest first), records this version cannot read left out and counted
        (``listing.page_of``). The cursor is ``list_cursor`` of the last job the page stepped over."""
        after = read_list_cursor(cursor) if cursor else None
        return page_of(self._listed(project, after, oldest_first, batch=limit + 1), limit)

    def list_jobs(
        self, project: str, *, limit: int = 20, cursor: str | None = None, oldest_first: bool = False
    ) -> tuple[list[GenerationRecord], str | None]:
        page = self.list_page(project, limit=limit, cursor=cursor, oldest_first=oldest_first)
        return page.records, page.next_cursor

    def _listed(
        self, project: str, after: tuple[float, str] | None, oldest_first: bool, *, batch: int
    ) -> Iterator[Listed]:
        """The project's index (zset by created ms) in the listing's order from ``after`` on."""
        name = keys.project_jobs(project)
        offset = 0
        while True:
            if oldest_first:
                low = after[0] if after is not None else "-inf"
                rows = self._r.zrangebyscore(name, low, "+inf", start=offset, num=batch, withscores=True)
            else:
                top = after[0] if after is not None else "+inf"
                rows = self._r.zrevrangebyscore(name, top, "-inf", start=offset, num=batch, withscores=True)
            offset += len(rows)
            for job_id, score in rows:
                # Members with equal scores come in id order (descending when newest first): skip those up
                # to the cursor.
                if (
                    after is not None
                    and score == after[0]
                    and (job_id <= after[1] if oldest_first else job_id >= after[1])
                ):
                    continue
                yield Listed(score, job_id, functools.partial(self.get, job_id))
            if len(rows) < batch:
                return

    # ----------------------------------------------------------------------------------- queue state
    @redis_unavailable
    def depth(self, model: str) -> int:
        return self._scripts.depth(model)

    @redis_unavailable
    def position(self, job_id: str) -> int | None:
        model = self.model_of(job_id)
        return None if model is None else self._scripts.position(model, job_id)

    # ----------------------------------------------------------------------------------- workers
    @redis_unavailable
    def heartbeat(self, beat: WorkerHeartbeat, *, ttl_s: float) -> None:
        pipe = self._r.pipeline(transaction=False)
        pipe.set(keys.worker_heartbeat(beat.worker_id), beat.model_dump_json(), px=max(1, int(ttl_s * 1000)))
        pipe.zadd(keys.WORKERS, {beat.worker_id: (beat.at.timestamp() if beat.at else 0.0) * 1000})
        pipe.execute()

    @redis_unavailable
    def live_workers(self) -> list[WorkerHeartbeat]:
        ids = sorted(self._r.zrange(keys.WORKERS, 0, -1))
        if not ids:
            return []
        pipe = self._r.pipeline(transaction=False)  # one GET per key: they live in different slots
        for worker_id in ids:
            pipe.get(keys.worker_heartbeat(worker_id))
        beats = pipe.execute()
        gone = [w for w, raw in zip(ids, beats, strict=True) if raw is None]
        if gone:
            self._r.zrem(keys.WORKERS, *gone)
        return [WorkerHeartbeat.model_validate_json(raw) for raw in beats if raw is not None]

    # ----------------------------------------------------------------------------------- logs
    @redis_unavailable
    def events(self, job_id: str | None = None, *, after: str | None = None, limit: int = 1000) -> list[Event]:
        cursor = _event_cursor(after) if after else None
        if job_id is not None:
            model = self.model_of(job_id)
            if model is None:
                return []
            start = f"({after.partition('/')[0]}" if after else "-"
            rows = self._r.xrange(keys.job_events(model, job_id), start, "+", count=limit)
            return [_event(model, sid, fields) for sid, fields in rows]
        merged: list[Event] = []
        for model in sorted(self._r.smembers(keys.MODELS)):
            # Inclusive start: an entry with the cursor's id in another model comes after it.
            start = f"{cursor[0][0]}-{cursor[0][1]}" if cursor else "-"
            for sid, fields in self._r.xrange(keys.events_stream(model), start, "+", count=limit + 1):
                if cursor is None or (_stream_id(sid), model) > cursor:
                    merged.append(_event(model, sid, fields))
        merged.sort(key=lambda e: _event_cursor(e.id))
        return merged[:limit]

    @redis_unavailable
    def progress_notes(self, job_id: str, *, after: str | None = None, limit: int = 1000) -> list[ProgressNote]:
        model = self.model_of(job_id)
        if model is None:
            return []
        start = f"({_checked_stream_id(after)}" if after else "-"
        rows = self._r.xrange(keys.job_progress(model, job_id), start, "+", count=limit)
        return [
            ProgressNote(
                job_id=job_id,
                attempt=int(f["attempt"]),
                stage=Stage(f["stage"]),
                progress=float(f["progress"]),
                at=datetime.fromisoformat(f["at"]),
                id=sid,
                preview=Preview.model_validate_json(f["preview"]) if f.get("preview") else None,
            )
            for sid, f in rows
        ]

    @redis_unavailable
    def dead_letters(self, limit: int = 100) -> list[DeadLetter]:
        merged: list[tuple[tuple[int, int], str, DeadLetter]] = []
        for model in sorted(self._r.smembers(keys.MODELS)):
            for sid, fields in self._r.xrange(keys.dead_stream(model), "-", "+", count=limit):
                dead = DeadLetter.model_validate({**fields, "id": f"{sid}/{model}"})
                merged.append((_stream_id(sid), model, dead))
        merged.sort(key=lambda t: (t[0], t[1]))
        return [dead for _, _, dead in merged[:limit]]

    # ----------------------------------------------------------------------------------- id → model
    def model_of(self, job_id: str) -> str | None:
        """The job's model (its records' hash slot), cached: a job never changes model."""
        with self._cache_lock:
            model = self._model_cache.get(job_id)
        if model is None:
            try:
                index = keys.job_model_index(job_id)
            except ValueError:  # not an id this queue could have made a key of: no such job
                return None
            model = self._r.get(index)
            if model is not None:
                self.remember_model(job_id, model)
        return model

    def remember_model(self, job_id: str, model: str) -> None:
        with self._cache_lock:
            if len(self._model_cache) > 100_000:  # a long-lived API process: bound the cache
                self._model_cache.clear()
            self._model_cache[job_id] = model


def _event(model: str, sid: str, fields: dict[str, str]) -> Event:
    return Event(
        job_id=fields["job_id"],
        status=Status(fields["status"]),
        attempt=int(fields["attempt"]),
        at=datetime.fromisoformat(fields["at"]),
        reason=fields.get("reason") or None,
        id=f"{sid}/{model}",
    )
