"""The pieces of the live event stream (``GET /v1/generations/{id}/events``) that hold no I/O.

A generation's live history comes from two durable logs the queue keeps per job (``docs/queue-protocol.md``):
its status events (``ApiQueue.events``) and its progress notes, one per stage/progress write of a
running attempt (``ApiQueue.progress_notes``). The stream sends both, merged in the order they
happened, each as one Server-Sent Event whose ``id:`` is the ``Cursor`` just past it: the pair of the
last event id and the last note id sent. A client that reconnects with that id as ``Last-Event-ID``
gets exactly what came after it: each log is read strictly after its own half of the cursor, so
nothing is lost or sent twice, whatever the interleaving.

Order across the two logs: within one attempt a job is claimed (status ``running``), writes its
notes, then leaves ``running`` (terminal, re-queued, lapsed). So ``merge`` sorts a batch by attempt,
then claim < notes < the status that ends the attempt, then each log's own order. Notes are only
written under a fenced claim, so this is the order in which the writes were accepted.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass

from foundation.core.contract import Status
from foundation.queue.base import Event, ProgressNote

__all__ = [
    "Cursor",
    "StreamSlots",
    "comment",
    "merge",
    "note_message",
    "status_message",
]

# The halves of a cursor as each backend writes its ids: SQLite row ids ("42", a signed 64-bit integer);
# Redis stream ids ("1700-0", two unsigned 64-bit integers), event ids with their model ("1700-0/tiny-wan";
# model names per queue-protocol.md). A cursor in another backend's shape, or past these bounds, is one
# this stream never sent, and reading after it would fail inside the backend once the stream had begun.
_SQLITE_ID = re.compile(r"[0-9]{1,19}")
_REDIS_NOTE_ID = re.compile(r"(?P<ms>[0-9]{1,20})(-(?P<seq>[0-9]{1,20}))?")
_REDIS_EVENT_ID = re.compile(r"(?P<ms>[0-9]{1,20})(-(?P<seq>[0-9]{1,20}))?(/[A-Za-z0-9._:/@+=-]{1,200})?")
_SQLITE_MAX = 2**63 - 1
_REDIS_MAX = 2**64 - 1
_TERMINAL = frozenset({Status.succeeded, Status.failed, Status.canceled})


@dataclass(frozen=True)
class Cursor:
    """Where a stream stands: the last status event and the last progress note sent ("" = none yet)."""

    event: str = ""
    note: str = ""

    def encode(self) -> str:
        """The SSE ``id:`` (and ``Last-Event-ID``): ``<event id>,<note id>``; neither contains a comma."""
        return f"{self.event},{self.note}"

    @classmethod
    def parse(cls, value: str, backend: str) -> Cursor:
        """A ``Last-Event-ID`` back into a cursor of the queue ``backend`` ("sqlite" or "redis");
        ``ValueError`` for anything this API on that backend never sent."""
        event, sep, note = value.strip().partition(",")
        if not sep or not all(_id_part_ok(part, backend, note=i == 1) for i, part in enumerate((event, note))):
            raise ValueError(f"not an event stream id: {value!r}")
        return cls(event, note)


def _id_part_ok(part: str, backend: str, *, note: bool) -> bool:
    if not part:
        return True
    if backend == "sqlite":
        return _SQLITE_ID.fullmatch(part) is not None and int(part) <= _SQLITE_MAX
    match = (_REDIS_NOTE_ID if note else _REDIS_EVENT_ID).fullmatch(part)
    return match is not None and all(int(match[n] or 0) <= _REDIS_MAX for n in ("ms", "seq"))


def _order(item: Event | ProgressNote) -> tuple[int, int]:
    if isinstance(item, ProgressNote):
        return item.attempt, 1
    return item.attempt, 0 if item.status is Status.running else 2


def merge(events: Iterable[Event], notes: Iterable[ProgressNote]) -> list[Event | ProgressNote]:
    """One batch of both logs in the order it happened (the module's docstring). ``sorted`` is stable
    and each log comes in its own order, so ties keep it."""
    items: list[Event | ProgressNote] = [*events, *notes]
    return sorted(items, key=_order)


def is_terminal(item: Event | ProgressNote) -> bool:
    return isinstance(item, Event) and item.status in _TERMINAL


def _message(kind: str, cursor: Cursor, data: dict[str, object]) -> bytes:
    body = json.dumps(data, separators=(",", ":"))
    return f"id: {cursor.encode()}\nevent: {kind}\ndata: {body}\n\n".encode()


def status_message(event: Event, cursor: Cursor, generation_id: str) -> bytes:
    """``event: status``: the generation's new status (the event's reason stays internal: it names
    workers). ``terminal`` is true on the last event of the stream."""
    data: dict[str, object] = {
        "generation_id": generation_id,
        "status": event.status.value,
        "attempt": event.attempt,
        "at": event.at.isoformat(),
        "terminal": event.status in _TERMINAL,
    }
    return _message("status", cursor, data)


def note_message(note: ProgressNote, cursor: Cursor, generation_id: str) -> bytes:
    """``event: progress``: the running attempt's stage and its progress in 0..1; then, when the write
    carried a live preview, ``event: preview`` with ``{"step", "total", "image"}`` (a JPEG data URL). Both
    carry the cursor past the note: a client resuming from either gets what follows the note."""
    data: dict[str, object] = {
        "generation_id": generation_id,
        "status": Status.running.value,
        "attempt": note.attempt,
        "stage": note.stage.value,
        "progress": round(note.progress, 4),
        "at": note.at.isoformat(),
    }
    message = _message("progress", cursor, data)
    if note.preview is not None:
        message += _message("preview", cursor, note.preview.model_dump())
    return message


def comment(text: str) -> bytes:
    """An SSE comment line: ignored by clients, it keeps the connection visibly alive (heartbeat)."""
    return f": {text}\n\n".encode()


class StreamSlots:
    """Open streams per API key on this process, at most ``limit`` each. The event loop is the only
    caller (no lock): ``take`` before the stream starts, ``give_back`` when it ends, however it ends."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._open: dict[str, int] = {}

    def take(self, key_id: str) -> bool:
        held = self._open.get(key_id, 0)
        if held >= self.limit:
            return False
        self._open[key_id] = held + 1
        return True

    def give_back(self, key_id: str) -> None:
        held = self._open.get(key_id, 0) - 1
        if held > 0:
            self._open[key_id] = held
        else:
            self._open.pop(key_id, None)

    def held(self, key_id: str) -> int:
        return self._open.get(key_id, 0)
