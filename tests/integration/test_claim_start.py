"""``claim.lua`` starts a plain queued job in the claim's own call: the same job hash, running set and
events as the start plan applied by ``commit.lua``, and the running record byte for byte what
``records.started`` writes. Anything it does not recognise is left to Python's start, as before."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from typing import Any, cast
from urllib.parse import urlsplit

import pytest
import redis

from foundation.core.contract import ErrorInfo, GenerationRecord, RecordParameters, Status
from foundation.core.errors import ErrorCode
from foundation.queue import keys, records
from foundation.queue.base import Claim, Outcome
from foundation.queue.redis.backend import RedisQueue
from foundation.queue.redis.scripts import Delivery, Scripts, Started
from tests.integration import queue_support
from tests.integration.queue_support import new_record

MODEL = "tiny-wan"
raw = queue_support.raw  # a plain client of the test's Redis


def _python_start(monkeypatch: pytest.MonkeyPatch) -> None:
    """Claims of this test deliver only (no lease for claim.lua), so Python starts the job: the old path."""
    deliver_only = Scripts.claim

    def claim(self: Scripts, models: Any, consumer: str, **options: Any) -> Any:
        return deliver_only(self, models, consumer, **{**options, "lease_ms": None})

    monkeypatch.setattr(Scripts, "claim", claim)


def _entries(raw: redis.Redis, stream: str) -> list[dict[str, str]]:
    return [dict(fields) for _, fields in cast(list[tuple[str, dict[str, str]]], raw.xrange(stream))]


def _stored(raw: redis.Redis, job_id: str) -> tuple[dict[str, str], list[dict[str, str]]]:
    job_hash = cast(dict[str, str], raw.hgetall(keys.job_record(MODEL, job_id)))
    return job_hash, _entries(raw, keys.job_events(MODEL, job_id))


def _claimed(queue: RedisQueue, worker_id: str = "w1") -> Claim:
    claim = queue.claim(worker_id, [MODEL])
    assert claim is not None
    return claim


def test_the_script_starts_a_job_as_the_start_plan_does(
    redis_url: str, raw: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    api, worker = RedisQueue(redis_url), RedisQueue(redis_url, lease_ttl_s=42)
    by_script = api.enqueue(new_record()).record
    in_lua = _claimed(worker)
    with monkeypatch.context() as m:
        _python_start(m)
        by_python = api.enqueue(new_record()).record
        in_python = _claimed(worker)
    assert (in_lua.job_id, in_python.job_id) == (by_script.id, by_python.id)

    lua_hash, lua_events = _stored(raw, by_script.id)
    py_hash, py_events = _stored(raw, by_python.id)
    assert set(lua_hash) == set(py_hash)
    differ = {"record", "entry", "plan", "seq"}  # the job's own: compared below
    assert {k: v for k, v in lua_hash.items() if k not in differ} == {
        k: v for k, v in py_hash.items() if k not in differ
    }
    # rev 3: the create, the hand-over from the fair order to the stream (lua/fair.lua), the start.
    assert lua_hash["status"] == "running" and lua_hash["lease_ms"] == "42000" and lua_hash["rev"] == "3"
    assert lua_hash["entry"] == in_lua.token.split("|")[0]
    assert lua_hash["plan"] != "" and lua_hash["plan"] != py_hash["plan"]
    assert raw.smembers(keys.running_set(MODEL)) == {by_script.id, by_python.id}

    # The events: the same fields, the start's clock as isoformat writes it.
    assert [e["status"] for e in lua_events] == [e["status"] for e in py_events] == ["queued", "running"]
    started_event, py_started = lua_events[1], py_events[1]
    assert {k for k in started_event} == {k for k in py_started}
    assert (
        (started_event["reason"], started_event["attempt"])
        == ("claimed by w1", "1")
        == (
            py_started["reason"],
            py_started["attempt"],
        )
    )
    assert started_event in _entries(raw, keys.events_stream(MODEL))

    # The claim in hand is the stored record, and the next write is planned from it (one call, accepted).
    stored = api.get(by_script.id)
    assert stored is not None and in_lua.record == stored and stored.attempt == 1
    assert stored.started_at == stored.updated_at
    assert started_event["at"] == stored.updated_at.isoformat()  # type: ignore[union-attr]
    done = Outcome(status=Status.succeeded)
    assert worker.finish(in_lua, done) and worker.finish(in_python, done)


@pytest.mark.parametrize(
    "record",
    [
        new_record(prompt='quotes " and \\ backslashes, ","attempt":9,"max_attempts":9 and }'),
        new_record(prompt="ünïcødé 🦊 \u2028 line\nbreaks\ttabs " + "long " * 2000),
        new_record(project="p_" + "x" * 60),
        new_record().model_copy(
            update={"parameters": RecordParameters(resolution="144p", duration_seconds=1, ratio="16:9", seed=2**32 - 1)}
        ),
    ],
    ids=["json-lookalike-prompt", "unicode-long-prompt", "long-project", "largest-seed"],
)
def test_the_running_record_is_byte_for_byte_records_started(
    redis_url: str, raw: redis.Redis, record: GenerationRecord
) -> None:
    api, worker = RedisQueue(redis_url), RedisQueue(redis_url)
    api.enqueue(record)
    queued = raw.hget(keys.job_record(MODEL, record.id), "record")
    claim = _claimed(worker)
    written = raw.hget(keys.job_record(MODEL, record.id), "record")
    assert isinstance(queued, str) and isinstance(written, str)
    at = claim.record.updated_at
    assert at is not None
    assert written == records.started(records.parse(queued), now=at).model_dump_json()
    assert claim.record.parameters.seed == record.parameters.seed


def test_a_retried_attempt_keeps_its_first_start_and_its_error(redis_url: str, raw: redis.Redis) -> None:
    api, worker = RedisQueue(redis_url), RedisQueue(redis_url)
    record = api.enqueue(new_record()).record
    first = _claimed(worker)
    error = ErrorInfo(code=ErrorCode.internal_error, message='transient "oops"')
    assert worker.retry(first, error, delay_s=0)
    queued = raw.hget(keys.job_record(MODEL, record.id), "record")
    assert isinstance(queued, str)
    second = _claimed(worker)
    assert second.attempt == 2 and second.record.started_at == first.record.started_at
    assert second.record.error == error
    at = second.record.updated_at
    assert at is not None
    written = raw.hget(keys.job_record(MODEL, record.id), "record")
    assert written == records.started(records.parse(queued), now=at).model_dump_json()


def test_a_record_in_another_layout_is_started_by_python(redis_url: str, raw: redis.Redis) -> None:
    """A record written by another version (here: the same data, other spacing and key order) is not
    the layout the script rewrites: it delivers the entry, and Python starts the job as it always did."""
    api, worker = RedisQueue(redis_url), RedisQueue(redis_url)
    record = api.enqueue(new_record()).record
    job = keys.job_record(MODEL, record.id)
    stored = raw.hget(job, "record")
    assert isinstance(stored, str)
    raw.hset(job, "record", json.dumps(dict(reversed(json.loads(stored).items())), indent=1))
    assert isinstance(worker._scripts.claim([MODEL], "probe", lease_ms=30_000), Delivery)  # read, not started
    raw.xgroup_setid(keys.job_stream(MODEL), keys.CONSUMER_GROUP, "0")  # deliver it again, to the worker
    raw.xgroup_delconsumer(keys.job_stream(MODEL), keys.CONSUMER_GROUP, "probe")
    claim = _claimed(worker)
    assert claim.job_id == record.id and claim.attempt == 1
    running = api.get(record.id)
    assert running is not None and running.status is Status.running


def test_a_plain_payload_is_started_and_any_other_is_only_delivered(redis_url: str, raw: redis.Redis) -> None:
    api, worker = RedisQueue(redis_url), RedisQueue(redis_url)
    record = api.enqueue(new_record()).record
    assert isinstance(worker._scripts.claim([MODEL], "w1", lease_ms=30_000), Started)
    # The same job pointed at by an entry read_payload also accepts, keys in another order: delivered.
    other = api.enqueue(new_record()).record
    job = keys.job_record(MODEL, other.id)
    entry = raw.xadd(keys.job_stream(MODEL), {"payload": json.dumps({"model": MODEL, "v": 1, "job_id": other.id})})
    raw.xdel(keys.job_stream(MODEL), str(raw.hget(job, "entry")))
    raw.hset(job, "entry", str(entry))
    delivered = worker._scripts.claim([MODEL], "w1", lease_ms=30_000)
    assert isinstance(delivered, Delivery) and delivered.entry == entry and delivered.record is not None
    assert api.get(record.id).status is Status.running  # type: ignore[union-attr]
    assert api.get(other.id).status is Status.queued  # type: ignore[union-attr]


@pytest.mark.parametrize("lease_ms", [30_000, None], ids=["started", "delivered"])
def test_a_re_sent_claim_answers_as_the_first_and_takes_no_second_job(
    redis_url: str, raw: redis.Redis, lease_ms: int | None
) -> None:
    """A claim call re-sent after its reply was lost (a cut connection: redis-py sends the call again)
    answers with the same entry and job, started once; a new call takes the next job."""
    api, worker = RedisQueue(redis_url), RedisQueue(redis_url)
    first, second = (api.enqueue(new_record()).record for _ in range(2))
    kind = Started if lease_ms else Delivery
    sent = worker._scripts.claim([MODEL], "w1", lease_ms=lease_ms, token="call-1")
    again = worker._scripts.claim([MODEL], "w1", lease_ms=lease_ms, token="call-1")  # the re-send
    assert isinstance(sent, kind) and isinstance(again, kind) and again == sent
    assert raw.xpending(keys.job_stream(MODEL), keys.CONSUMER_GROUP)["pending"] == 1
    statuses = [e["status"] for e in _entries(raw, keys.job_events(MODEL, first.id))]
    assert statuses == (["queued", "running"] if lease_ms else ["queued"])  # started once
    after = worker._scripts.claim([MODEL], "w1", lease_ms=lease_ms, token="call-2")
    assert isinstance(after, kind) and after.entry != sent.entry
    assert second.id in (after.job_id if isinstance(after, Started) else after.fields["payload"])


def test_a_removed_consumer_takes_its_last_claim_note_with_it(redis_url: str, raw: redis.Redis) -> None:
    api, worker = RedisQueue(redis_url), RedisQueue(redis_url, consumer_idle_s=0.1)
    api.enqueue(new_record())
    done = Outcome(status=Status.succeeded)
    assert worker.finish(_claimed(worker, "w-stopped"), done)
    assert raw.hget(keys.claims(MODEL), "w-stopped") is not None
    time.sleep(0.2)
    worker.purge_expired()  # the consumer holds nothing and is idle past the bound: removed
    assert raw.hget(keys.claims(MODEL), "w-stopped") is None


class _LosesOneReply:
    """A TCP proxy in front of Redis that cuts the connection instead of passing on the first reply
    holding ``marker``: the call ran on the server, its client never hears of it and sends it again."""

    def __init__(self, port: int, marker: bytes) -> None:
        self._upstream, self._marker, self.cut = port, marker, 0
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            server = socket.create_connection(("127.0.0.1", self._upstream))
            threading.Thread(target=self._pipe, args=(client, server, False), daemon=True).start()
            threading.Thread(target=self._pipe, args=(server, client, True), daemon=True).start()

    def _pipe(self, source: socket.socket, sink: socket.socket, replies: bool) -> None:
        try:
            while chunk := source.recv(65536):
                if replies and not self.cut and self._marker in chunk:
                    self.cut += 1
                    break
                sink.sendall(chunk)
        except OSError:
            pass
        for end in (source, sink):
            with contextlib.suppress(OSError):
                end.shutdown(socket.SHUT_RDWR)
            end.close()

    def close(self) -> None:
        self._listener.close()


def test_a_claim_whose_reply_is_lost_gets_the_same_job_when_redis_py_sends_it_again(
    redis_url: str, raw: redis.Redis
) -> None:
    api = RedisQueue(redis_url)
    first, second = (api.enqueue(new_record()).record for _ in range(2))
    port = urlsplit(redis_url).port
    assert port is not None
    proxy = _LosesOneReply(port, b"started")
    worker = RedisQueue(f"redis://127.0.0.1:{proxy.port}/0")
    try:
        claim = worker.claim("w1", [MODEL])
        assert proxy.cut == 1  # the first reply never reached the worker: redis-py sent the call again
        assert claim is not None and claim.job_id == first.id and claim.attempt == 1
        assert raw.xpending(keys.job_stream(MODEL), keys.CONSUMER_GROUP)["pending"] == 1
        queued = api.get(second.id)
        assert queued is not None and queued.status is Status.queued  # not taken by the re-send
        assert worker.finish(claim, Outcome(status=Status.succeeded))
        statuses = [e["status"] for e in _entries(raw, keys.job_events(MODEL, first.id))]
        assert statuses == ["queued", "running", "succeeded"]
    finally:
        worker.close()
        proxy.close()
