"""The live event stream of one generation (``GET /v1/generations/{id}/events``, Server-Sent Events).

Pure parts shared by ``Client`` and ``AsyncClient``: ``StreamEvent`` (one message), ``SseParser``
(text lines in, messages out, per the SSE rules: ``event:``, ``data:``, ``id:``, comment lines,
a blank line ends a message) and ``StreamFollower``, the policy of ``wait``'s streaming half: resume
with ``Last-Event-ID`` after a dropped connection, and give up on the stream (the caller then polls
at the spec's cadence) when the server does not offer it (404, 405, 429 ``too_many_streams``, 501,
a 5xx) or it keeps failing.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

__all__ = ["STREAM_GIVE_UP_STATUSES", "SseParser", "StreamEvent", "StreamFollower"]

# Answers to the stream request after which ``wait`` polls instead: a server without the route (404,
# 405, 501), one that has no stream left for this key (429), one that cannot serve it now (5xx).
STREAM_GIVE_UP_STATUSES = frozenset({404, 405, 429, 501, 500, 502, 503, 504})


@dataclass(frozen=True)
class StreamEvent:
    """One message of the stream. ``kind`` is ``status`` (the generation's status changed) or
    ``progress`` (the running attempt's ``stage`` and ``progress`` 0..1); ``id`` resumes after it."""

    kind: str
    id: str
    generation_id: str
    status: str
    attempt: int
    at: str
    stage: str | None = None
    progress: float | None = None
    terminal: bool = False

    @classmethod
    def from_message(cls, kind: str, event_id: str, data: dict[str, Any]) -> StreamEvent:
        progress = data.get("progress")
        return cls(
            kind=kind,
            id=event_id,
            generation_id=str(data.get("generation_id", "")),
            status=str(data.get("status", "")),
            attempt=int(data.get("attempt", 0)),
            at=str(data.get("at", "")),
            stage=data.get("stage"),
            progress=float(progress) if progress is not None else None,
            terminal=bool(data.get("terminal", False)),
        )


@dataclass
class SseParser:
    """Feed it the stream's lines (without their line ending); it returns a message at each blank line.
    Unknown event kinds and undecodable data are skipped: a newer server may send more."""

    comments: int = 0  # comment lines seen (the server's heartbeats)
    _kind: str = ""
    _id: str = ""
    _data: list[str] = field(default_factory=list)

    def feed(self, line: str) -> StreamEvent | None:
        if line == "":
            return self._dispatch()
        if line.startswith(":"):
            self.comments += 1
            return None
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "event":
            self._kind = value
        elif name == "data":
            self._data.append(value)
        elif name == "id" and "\0" not in value:
            self._id = value
        return None

    def _dispatch(self) -> StreamEvent | None:
        kind, data, self._kind, self._data = self._kind or "message", self._data, "", []
        if not data or kind not in ("status", "progress"):
            return None
        try:
            payload = json.loads("\n".join(data))
        except ValueError:
            return None
        return StreamEvent.from_message(kind, self._id, payload) if isinstance(payload, dict) else None


@dataclass
class StreamFollower:
    """Where one ``wait`` stands on the stream: the last id seen (sent back as ``Last-Event-ID``) and
    how many connections in a row ended without a terminal event or any new message, and the last status
    it carried (what a ``WaitTimeout`` reports)."""

    max_failures: int = 3
    last_id: str | None = None
    failures: int = 0
    terminal: StreamEvent | None = None
    status: str | None = None

    def headers(self) -> dict[str, str]:
        headers = {"Accept": "text/event-stream"}
        if self.last_id:
            headers["Last-Event-ID"] = self.last_id
        return headers

    def seen(self, event: StreamEvent) -> None:
        self.last_id = event.id or self.last_id
        self.status = event.status or self.status
        self.failures = 0
        if event.terminal:
            self.terminal = event

    def connection_ended(self) -> bool:
        """A connection ended without the terminal event; True while another try is worth it."""
        self.failures += 1
        return self.failures < self.max_failures
