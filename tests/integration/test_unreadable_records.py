"""Records this version cannot read (issue 50), on both queue backends (a real redis-server, a SQLite file):
a newer version's record during a rolling upgrade, and a record of this version's format that does not parse.

Through the HTTP API: a coded GET (503 ``version_unavailable``, 410 ``record_unreadable``, or a ``failed``
view for what still validates), never a 500; the project's list without them and a count (``skipped``),
never a 500 or a 400 blamed on the cursor. Through the queue: a worker that meets such a record ends its
job ``failed`` in a text every version reads, never ``running`` for ever.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis

from foundation.core.contract import GenerationRecord, Status
from foundation.queue import keys
from foundation.queue.base import JobQueue
from foundation.queue.errors import UnreadableRecord
from foundation.queue.policy import DeadReason
from tests.e2e.conftest import Stack, add_keys, start_stack
from tests.integration import queue_support
from tests.integration.queue_support import BACKENDS, new_record, stored_status
from tests.integration.worker_harness import wait_until

make_queue = queue_support.make_queue  # per-backend fixture: redis and sqlite
MakeQueue = Callable[..., JobQueue]

GARBAGE = '{"id": "cut short by a faulty write'  # no JSON object: nothing of it validates


@pytest.fixture(params=BACKENDS)
def api_stack(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Stack]:
    """The API over a queue on Redis or SQLite, with the e2e suite's named keys (``alpha``, ``beta``)."""
    redis_url = request.getfixturevalue("redis_url") if request.param == "redis" else None
    stack = start_stack(tmp_path / "api", redis_url=redis_url)
    add_keys(stack)
    yield stack
    stack.stop()


def _write(stack: Stack, record: GenerationRecord, text: str, record_format: int | None = None) -> None:
    """Store ``text`` as the record (and ``record_format`` beside it), as another version or a faulty
    write would leave it: only those fields change."""
    settings = stack.settings.queue
    if settings.backend == "redis":
        with closing(redis.Redis.from_url(settings.redis_url)) as client:
            fields: dict[str, Any] = {"record": text}
            if record_format is not None:
                fields["format"] = record_format
            client.hset(keys.job_record(record.model, record.id), mapping=fields)
        return
    with closing(sqlite3.connect(settings.sqlite_path)) as conn, conn:
        conn.execute("UPDATE jobs SET record = ? WHERE id = ?", (text, record.id))
        if record_format is not None:
            conn.execute("UPDATE jobs SET record_format = ? WHERE id = ?", (record_format, record.id))


def _newer_text(record: GenerationRecord) -> str:
    """The record as a newer version writes it: a stage this version does not know, a field it lacks."""
    return json.dumps({**json.loads(record.model_dump_json()), "stage": "reviewing", "priority": "high"})


def _three(stack: Stack) -> list[GenerationRecord]:
    """Three of project alpha's jobs, oldest first (each created after the one before)."""
    return [stack.queue.enqueue(new_record(project="alpha", prompt=f"fox {i}")).record for i in range(3)]


def _listed(client: httpx.Client, path: str, **params: Any) -> dict[str, Any]:
    answer = client.get(path, params=params)
    assert answer.status_code == 200, answer.text
    return answer.json()  # type: ignore[no-any-return]


def _error(answer: httpx.Response, status: int) -> dict[str, Any]:
    assert answer.status_code == status, answer.text
    return answer.json()["error"]  # type: ignore[no-any-return]


def test_a_newer_record_gives_a_coded_get_and_a_list_without_it(api_stack: Stack) -> None:
    """A rolling upgrade: a newer version rewrote one job in record format 2. This version answers a GET of
    it 503 ``version_unavailable`` (retry: a replica of the newer version reads it) and lists the others
    with a count of the one left out; before, the GET was a 500 and the whole list a 400 on a cursor."""
    older, newer, newest = _three(api_stack)
    _write(api_stack, newer, _newer_text(newer), record_format=2)
    with api_stack.client("alpha") as alpha, api_stack.client("beta") as beta:
        answer = alpha.get(f"/v1/generations/{newer.id}")
        assert _error(answer, 503)["code"] == "version_unavailable"
        assert int(answer.headers["Retry-After"]) > 0
        assert _error(beta.get(f"/v1/generations/{newer.id}"), 404)["code"] == "not_found"  # ids never leak
        assert alpha.get(f"/v1/generations/{newest.id}").json()["status"] == "queued"

        listed = _listed(alpha, "/v1/generations")
        assert [g["id"] for g in listed["data"]] == [newest.id, older.id]
        assert (listed["skipped"], listed["next_cursor"]) == (1, None)
        first = _listed(alpha, "/v1/generations", limit=1)  # paged: the one left out is counted once
        assert ([g["id"] for g in first["data"]], first["skipped"]) == ([newest.id], 0)
        second = _listed(alpha, "/v1/generations", limit=1, cursor=first["next_cursor"])
        assert ([g["id"] for g in second["data"]], second["skipped"], second["next_cursor"]) == ([older.id], 1, None)

        assert _error(alpha.get(f"/v1/videos/{newer.id}"), 503)["code"] == "version_unavailable"
        videos = _listed(alpha, "/v1/videos")
        assert ([v["id"] for v in videos["data"]], videos["skipped"]) == ([newest.id, older.id], 1)
        assert _error(alpha.get("/v1/generations", params={"cursor": "nan:x"}), 400)["param"] == "cursor"


def test_a_record_that_does_not_parse_gives_a_coded_get_and_is_skipped_in_the_list(api_stack: Stack) -> None:
    """Records of this version's own format that do not validate: one whose text is no record answers 410
    ``record_unreadable`` and is counted out of the list; one with a value that does not validate reads as
    ``failed`` with that code, what else it says kept, and is listed."""
    older, broken, odd = _three(api_stack)
    _write(api_stack, broken, GARBAGE)
    _write(api_stack, odd, json.dumps({**json.loads(odd.model_dump_json()), "status": "paused"}))
    with api_stack.client("alpha") as alpha, api_stack.client("beta") as beta:
        assert _error(alpha.get(f"/v1/generations/{broken.id}"), 410)["code"] == "record_unreadable"
        assert _error(beta.get(f"/v1/generations/{broken.id}"), 404)["code"] == "not_found"
        assert _error(alpha.post(f"/v1/generations/{broken.id}/cancel"), 410)["code"] == "record_unreadable"
        shown = alpha.get(f"/v1/generations/{odd.id}").json()
        assert (shown["status"], shown["error"]["code"], shown["input"]["prompt"]) == (
            "failed",
            "record_unreadable",
            "fox 2",
        )
        listed = _listed(alpha, "/v1/generations")
        assert ([g["id"] for g in listed["data"]], listed["skipped"]) == ([odd.id, older.id], 1)
        assert _error(alpha.get(f"/v1/videos/{broken.id}"), 410)["code"] == "record_unreadable"
        assert _listed(alpha, "/v1/videos", order="asc")["skipped"] == 1


def _claimed_all(q: JobQueue, count: int) -> None:
    for _ in range(count):
        assert q.claim("dies", ["tiny-wan"]) is not None


def test_a_set_aside_job_ends_failed_where_every_version_reads_it(make_queue: MakeQueue) -> None:
    """A running job whose record stopped parsing (its worker died): the reaper sets it aside with a dead
    letter and ends it ``failed``, in a text every version reads when anything of it validates; before,
    it stayed ``running`` for ever (the dead letter written, nothing pending, every GET a 500)."""
    q = make_queue(lease_ttl_s=0.3)
    jobs = [q.enqueue(new_record()).record for _ in range(3)]
    _claimed_all(q, 3)
    broken, odd, good = jobs
    queue_support.write_raw_record(make_queue, broken, status=["not", "a", "status"], parameters="none")
    queue_support.write_raw_record(make_queue, odd, status="paused")

    def reaped() -> bool:
        q.reclaim_expired()  # the reaper's pass, until every lease lapsed and it ran
        return [stored_status(make_queue, j)[0] for j in jobs] == ["failed", "failed", "queued"]

    wait_until(reaped, "both unreadable jobs to end failed, the other to be re-queued", timeout_s=15)
    with pytest.raises(UnreadableRecord) as unreadable:  # nothing of it validates: the API answers 410
        q.get(broken.id)
    assert unreadable.value.project == "proj-a"
    text = queue_support.read_raw_record(make_queue, odd) or ""
    shown = GenerationRecord.model_validate_json(text)  # as any version reads it, format checks aside
    assert (shown.status, shown.error and shown.error.code.value) == (Status.failed, "record_unreadable")
    assert shown.finished_at is not None and shown.input.prompt == odd.input.prompt
    dead = sorted((d.job_id, d.reason, d.code) for d in q.dead_letters())
    assert dead == sorted((j.id, DeadReason.invalid_record, "record_unreadable") for j in (broken, odd))
    assert [e.status for e in q.events(broken.id)][-1] is Status.failed
    page = q.list_page("proj-a")
    assert ([r.id for r in page.records], page.skipped) == ([good.id, odd.id], 1)
    assert q.reclaim_expired() == 0 and len(q.dead_letters()) == 2  # ended once, never met again


def test_the_claim_path_ends_a_queued_record_that_is_no_record(make_queue: MakeQueue) -> None:
    """Met by a claim while queued: set aside, ended ``failed`` (never claimed, never left ``queued``)."""
    q = make_queue()
    broken, good = q.enqueue(new_record()).record, q.enqueue(new_record()).record
    location = make_queue.location  # type: ignore[attr-defined]
    if make_queue.backend == "redis":  # type: ignore[attr-defined]
        with closing(redis.Redis.from_url(location)) as client:
            client.hset(keys.job_record(broken.model, broken.id), "record", GARBAGE)
    else:
        with closing(sqlite3.connect(location)) as conn, conn:
            conn.execute("UPDATE jobs SET record = ? WHERE id = ?", (GARBAGE, broken.id))
    claim = q.claim("w1", ["tiny-wan"])
    assert claim is not None and claim.job_id == good.id
    assert stored_status(make_queue, broken)[0] == "failed"
    assert [(d.job_id, d.raw) for d in q.dead_letters()] == [(broken.id, GARBAGE)]
    assert q.claim("w1", ["tiny-wan"]) is None and q.depth("tiny-wan") == 0


def test_the_event_stream_of_an_unreadable_record_is_coded_as_its_get(api_stack: Stack) -> None:
    """``GET /v1/generations/{id}/events`` answers a record this version cannot read as the GET does: 503
    ``version_unavailable`` for a newer version's, 410 ``record_unreadable`` for one that does not parse,
    404 to another project; before, the stream's first read was a 500."""
    newer, broken, fine = _three(api_stack)
    _write(api_stack, newer, _newer_text(newer), record_format=2)
    _write(api_stack, broken, GARBAGE)
    with api_stack.client("alpha") as alpha, api_stack.client("beta") as beta:
        answer = alpha.get(f"/v1/generations/{newer.id}/events")
        assert _error(answer, 503)["code"] == "version_unavailable"
        assert int(answer.headers["Retry-After"]) > 0
        assert _error(alpha.get(f"/v1/generations/{broken.id}/events"), 410)["code"] == "record_unreadable"
        assert _error(beta.get(f"/v1/generations/{broken.id}/events"), 404)["code"] == "not_found"
        with alpha.stream("GET", f"/v1/generations/{fine.id}/events") as stream:  # the others still stream
            assert stream.status_code == 200
            assert next(stream.iter_lines()) == ": stream open"
