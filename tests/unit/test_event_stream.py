"""The I/O-free parts of the live event stream: cursors, the merge of the two logs, the SSE parser."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from api.event_stream import Cursor, StreamSlots, merge, note_message, status_message
from foundation.core.contract import Stage, Status
from foundation.queue.base import Event, ProgressNote
from genworker_client.events import SseParser, StreamFollower

AT = datetime(2026, 11, 23, tzinfo=UTC)


def _event(status: Status, attempt: int, event_id: str) -> Event:
    return Event(job_id="gen_a", status=status, attempt=attempt, at=AT, id=event_id)


def _note(attempt: int, stage: Stage, note_id: str) -> ProgressNote:
    return ProgressNote(job_id="gen_a", attempt=attempt, stage=stage, progress=0.0, at=AT, id=note_id)


@pytest.mark.parametrize(
    ("value", "backend"),
    [
        ("1,", "sqlite"),
        (",", "sqlite"),
        ("12,7", "sqlite"),
        ("9223372036854775807,", "sqlite"),  # SQLite's largest row id
        (",", "redis"),
        ("1700-0/tiny-wan,1700-3", "redis"),
        ("1700-0/m.v:2@x=y,", "redis"),
        ("18446744073709551615-18446744073709551615/m,18446744073709551615-0", "redis"),  # Redis' largest
    ],
)
def test_cursor_round_trips(value: str, backend: str) -> None:
    assert Cursor.parse(value, backend).encode() == value


@pytest.mark.parametrize(
    ("value", "backend"),
    [
        *((v, b) for v in ("", "1", "x,1", "1,y", "1;2", "1,2,3", "1-2-3,", "1/a b,") for b in ("sqlite", "redis")),
        ("1700-0/tiny-wan,", "sqlite"),  # the other backend's ids: reading after them fails in the backend
        ("5,1700-0", "sqlite"),
        ("9223372036854775808,", "sqlite"),  # past SQLite's integers
        (",99999999999999999999", "sqlite"),
        ("18446744073709551616-0/tiny-wan,", "redis"),  # past Redis' 64-bit stream ids
        (",1-18446744073709551616", "redis"),
        (",1-0/tiny-wan", "redis"),  # a note id has no model
    ],
)
def test_cursor_refuses_what_the_api_on_this_backend_never_sent(value: str, backend: str) -> None:
    with pytest.raises(ValueError):
        Cursor.parse(value, backend)


def test_merge_places_notes_inside_their_attempt() -> None:
    """A retried job read in one batch: each attempt's notes between its claim and its end."""
    events = [
        _event(Status.queued, 0, "1"),
        _event(Status.running, 1, "2"),
        _event(Status.queued, 1, "3"),
        _event(Status.running, 2, "4"),
        _event(Status.succeeded, 2, "5"),
    ]
    notes = [_note(1, Stage.loading, "1"), _note(2, Stage.loading, "2"), _note(2, Stage.uploading, "3")]
    order = [(type(i).__name__, i.id) for i in merge(events, notes)]
    assert order == [
        ("Event", "1"),
        ("Event", "2"),
        ("ProgressNote", "1"),
        ("Event", "3"),
        ("Event", "4"),
        ("ProgressNote", "2"),
        ("ProgressNote", "3"),
        ("Event", "5"),
    ]


def test_messages_parse_back_in_the_client() -> None:
    parser = SseParser()
    wire = status_message(_event(Status.running, 1, "2"), Cursor("2", ""), "gen_a")
    wire += b": heartbeat\n\n" + note_message(_note(1, Stage.denoising, "9"), Cursor("2", "9"), "gen_a")
    wire += status_message(_event(Status.failed, 1, "3"), Cursor("3", "9"), "gen_a")
    parsed = [e for line in wire.decode().split("\n") if (e := parser.feed(line)) is not None]
    assert [(e.kind, e.id, e.status, e.stage, e.terminal) for e in parsed] == [
        ("status", "2,", "running", None, False),
        ("progress", "2,9", "running", "denoising", False),
        ("status", "3,9", "failed", None, True),
    ]
    assert parser.comments == 1
    follower = StreamFollower()
    for event in parsed:
        follower.seen(event)
    assert follower.headers()["Last-Event-ID"] == "3,9" and follower.terminal is parsed[-1]


def test_slots_cap_each_key_and_come_back() -> None:
    slots = StreamSlots(2)
    assert slots.take("k1") and slots.take("k1") and not slots.take("k1")
    assert slots.take("k2")
    slots.give_back("k1")
    assert slots.held("k1") == 1 and slots.take("k1")
