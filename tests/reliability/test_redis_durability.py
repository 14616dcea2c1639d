"""Acknowledged means durable: ``queue.wait_replicas`` (``WAIT``) under replica stalls, re-sent commits,
Cluster routing and a Sentinel failover during a backlog (issue 16, item 4).

Real ``redis-server`` processes on loopback: a primary with a replica (stalled with ``SIGSTOP``, so it
neither applies nor acknowledges), the session's 3-master cluster, and a Sentinel deployment (primary,
two replicas, three sentinels) whose primary is killed with ``kill -9`` while three consumers work
through a backlog that a producer keeps feeding.
"""

from __future__ import annotations

import signal
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from foundation.core.contract import Status
from foundation.core.errors import BackendUnavailable
from foundation.queue import keys
from foundation.queue.base import JobQueue, Outcome
from foundation.queue.config import QueueSettings
from foundation.queue.errors import NotDurable
from foundation.queue.factory import open_queue
from foundation.queue.redis import plans as redis_plans
from foundation.queue.redis.backend import RedisQueue
from foundation.queue.redis.connect import redis_client
from foundation.queue.redis.durability import Durability
from foundation.queue.redis.scripts import Scripts
from tests.fixtures.redis_cluster import LocalCluster
from tests.fixtures.redis_sentinel import SentinelGroup, start_sentinel_group
from tests.fixtures.redis_server import RedisServer, start_redis
from tests.integration.queue_support import new_record

pytestmark = pytest.mark.slow

TERMINAL = {Status.succeeded, Status.failed, Status.canceled}
# A wait that must time out (the replica is stopped) is kept short; one that must succeed gets room
# for a loaded machine, where a replica may take a while to acknowledge.
STALLED_MS = 300
CONFIRM_MS = 10_000


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[tuple[RedisServer, RedisServer]]:
    """A primary and one replica, linked."""
    primary = start_redis(tmp_path / "primary", "--repl-diskless-sync-delay", "0")
    replica = start_redis(tmp_path / "replica", "--replicaof", "127.0.0.1", str(primary.port))
    try:
        deadline = time.monotonic() + 15
        # Linked on both ends: the replica's link is up and the primary counts it online (WAIT 0 0, what the
        # queue asks to settle wait_replicas); the primary sees it a moment after the replica's side is up.
        while not (
            replica.client().info("replication").get("master_link_status") == "up"
            and int(primary.client().execute_command("WAIT", 0, 0)) >= 1
        ):
            assert time.monotonic() < deadline, "replica did not sync"
            time.sleep(0.05)
        yield primary, replica
    finally:
        if replica.proc is not None:
            replica.proc.send_signal(signal.SIGCONT)  # a test that failed while it was stopped
        replica.stop()
        primary.stop()


def durable_queue(url: str, timeout_ms: int = CONFIRM_MS) -> RedisQueue:
    settings = QueueSettings(backend="redis", redis_url=url, wait_replicas=1, wait_timeout_ms=timeout_ms)
    queue = open_queue(settings)
    assert isinstance(queue, RedisQueue)
    return queue


def stored_on(server: RedisServer, job_id: str) -> Status | None:
    """The job's status as ``server`` (a replica) holds it, read with a queue of its own."""
    queue = RedisQueue(server.client())
    try:
        record = queue.get(job_id)
        return record.status if record else None
    finally:
        queue.close()


def test_confirmed_commits_are_on_the_replica_when_they_return(pair: tuple[RedisServer, RedisServer]) -> None:
    primary, replica = pair
    queue = durable_queue(primary.url)
    record = queue.enqueue(new_record(), idempotency_key="k1").record
    assert stored_on(replica, record.id) is Status.queued  # no sleep: WAIT returned only after the ack
    claim = queue.claim("w1", ["tiny-wan"], block_s=1)
    assert claim is not None
    assert stored_on(replica, record.id) is Status.running
    assert queue.finish(claim, Outcome(status=Status.succeeded))
    assert stored_on(replica, record.id) is Status.succeeded


def test_unconfirmed_enqueue_is_unavailable_and_its_replay_waits_too(
    pair: tuple[RedisServer, RedisServer],
) -> None:
    primary, replica = pair
    stalled, queue = durable_queue(primary.url, STALLED_MS), durable_queue(primary.url)
    assert replica.proc is not None
    replica.proc.send_signal(signal.SIGSTOP)
    try:
        with pytest.raises(NotDurable, match="not confirmed durable"):
            stalled.enqueue(new_record(), idempotency_key="k2")
        # The client re-sends with its key: the job exists on the primary, but the replay must not
        # answer 202 while the replica still lacks it.
        with pytest.raises(BackendUnavailable):
            stalled.enqueue(new_record(), idempotency_key="k2")
    finally:
        replica.proc.send_signal(signal.SIGCONT)
    result = queue.enqueue(new_record(), idempotency_key="k2")
    assert result.replayed
    assert stored_on(replica, result.record.id) is Status.queued


def test_a_resent_commit_waits_for_the_first_runs_writes(pair: tuple[RedisServer, RedisServer]) -> None:
    """The first run's reply is lost (here: not confirmed), the client re-sends the same plan on a fresh
    connection: ``commit.lua`` answers ``applied`` without writing, and that connection's WAIT must still
    cover the first run (Redis records the offset after every command), so it is not confirmed either."""
    primary, replica = pair
    plan = redis_plans.create(new_record())
    assert replica.proc is not None
    replica.proc.send_signal(signal.SIGSTOP)
    try:
        first = Scripts(redis_client(QueueSettings(redis_url=primary.url)), 1000, Durability(1, timeout_ms=STALLED_MS))
        with pytest.raises(NotDurable):
            first.commit(plan)
        again = Scripts(redis_client(QueueSettings(redis_url=primary.url)), 1000, Durability(1, timeout_ms=STALLED_MS))
        with pytest.raises(NotDurable):
            again.commit(plan)
    finally:
        replica.proc.send_signal(signal.SIGCONT)
    confirming = Scripts(redis_client(QueueSettings(redis_url=primary.url)), 1000, Durability(1, timeout_ms=CONFIRM_MS))
    assert confirming.commit(plan).kind == "applied"


def test_an_unconfirmed_claim_is_released_without_using_an_attempt(pair: tuple[RedisServer, RedisServer]) -> None:
    primary, replica = pair
    stalled, queue = durable_queue(primary.url, STALLED_MS), durable_queue(primary.url)
    job = queue.enqueue(new_record()).record
    assert replica.proc is not None
    replica.proc.send_signal(signal.SIGSTOP)
    try:
        with pytest.raises(NotDurable):
            stalled.claim("w1", ["tiny-wan"], block_s=1)
    finally:
        replica.proc.send_signal(signal.SIGCONT)
    record = queue.get(job.id)
    assert record is not None and record.status is Status.queued
    assert "released: claim_not_durable" in [e.reason for e in queue.events(job.id)]
    claim = queue.claim("w2", ["tiny-wan"], block_s=2)
    assert claim is not None and claim.job_id == job.id
    assert queue.finish(claim, Outcome(status=Status.succeeded))
    done = queue.get(job.id)
    assert done is not None and done.status is Status.succeeded and done.attempt == 2
    # ... of which one was released for free: out_of_attempts counts attempt - released.
    assert primary.client().hget(keys.job_record("tiny-wan", job.id), "released") == "1"


def test_cluster_waits_on_the_node_that_owns_the_job(redis_cluster: LocalCluster, redis_cluster_url: str) -> None:
    """The cluster has no replicas: a commit must wait on its own node (not fan WAIT out to every
    primary, which a cluster pipeline refuses) and report that nobody confirmed it."""
    settings = QueueSettings(
        backend="redis", redis_mode="cluster", redis_url=redis_cluster_url, wait_replicas=1, wait_timeout_ms=100
    )
    queue = open_queue(settings)
    try:
        with pytest.raises(NotDurable, match="0 replica"):
            queue.enqueue(new_record())
    finally:
        queue.close()


def test_wait_replicas_defaults_to_one_where_the_deployment_has_a_replica(
    pair: tuple[RedisServer, RedisServer], redis_url: str, redis_cluster_url: str
) -> None:
    """Unset, ``queue.wait_replicas`` is 1 on a primary with a replica (so what a 202 acknowledged survives a
    failover without anyone having to know the setting), 0 on a lone server and on a cluster whose shards
    have no replica (a WAIT there could never be confirmed); a value set explicitly is kept."""
    primary, replica = pair

    def waits_for(**settings: object) -> int:
        queue = open_queue(QueueSettings(backend="redis", **settings))  # type: ignore[arg-type]
        try:
            assert isinstance(queue, RedisQueue)
            return queue.durability.replicas
        finally:
            queue.close()

    assert waits_for(redis_url=primary.url) == 1
    assert waits_for(redis_url=primary.url, wait_replicas=0) == 0
    assert waits_for(redis_url=redis_url) == 0
    assert waits_for(redis_url=redis_cluster_url, redis_mode="cluster") == 0
    queue = open_queue(QueueSettings(backend="redis", redis_url=primary.url, wait_timeout_ms=CONFIRM_MS))
    try:
        record = queue.enqueue(new_record()).record
        assert stored_on(replica, record.id) is Status.queued  # no sleep: the default waited for the replica
    finally:
        queue.close()


def test_wait_aof_is_refused_at_start_by_a_server_that_cannot_give_it(redis_url: str) -> None:
    """This server runs without appendonly (and is 7.0 here): ``WAITAOF`` cannot work, say so at open."""
    with pytest.raises(ValueError, match=r"queue\.wait_aof"):
        open_queue(QueueSettings(backend="redis", redis_url=redis_url, wait_aof=True))


# ----------------------------------------------------------------------------------- Sentinel failover


@pytest.fixture
def sentinel(tmp_path: Path) -> Iterator[SentinelGroup]:
    group = start_sentinel_group(tmp_path / "sentinel", replicas=2)
    try:
        yield group
    finally:
        group.stop()


class Backlog:
    """A producer and three consumers on their own sentinel-mode queues, retrying through a failover."""

    def __init__(self, settings: QueueSettings, total: int) -> None:
        self.settings = settings
        self.total = total
        self.accepted: dict[str, str] = {}  # idempotency key → job id, once a 202 would have been sent
        self.confirmed_finishes: Counter[str] = Counter()  # finish() returned True
        self.unavailable = 0
        self.stop = threading.Event()
        self.lock = threading.Lock()

    def produce(self) -> None:
        queue = open_queue(self.settings)
        try:
            for n in range(self.total):
                key = f"job-{n}"
                while not self.stop.is_set():
                    try:
                        job_id = queue.enqueue(new_record(), idempotency_key=key).record.id
                    except BackendUnavailable:
                        self._count_unavailable()
                        continue
                    with self.lock:
                        self.accepted[key] = job_id
                    break
                time.sleep(0.01)
        finally:
            queue.close()

    def consume(self, name: str) -> None:
        queue = open_queue(self.settings)
        try:
            while not self.stop.is_set():
                try:
                    claim = queue.claim(name, ["tiny-wan"], block_s=0.3)
                    if claim is None:
                        continue
                    queue.progress(claim, claim.record.stage, 0.5)
                    time.sleep(0.02)
                    if queue.finish(claim, Outcome(status=Status.succeeded)):
                        with self.lock:
                            self.confirmed_finishes[claim.job_id] += 1
                except BackendUnavailable:
                    self._count_unavailable()
        finally:
            queue.close()

    def _count_unavailable(self) -> None:
        with self.lock:
            self.unavailable += 1
        time.sleep(0.1)


def test_a_sentinel_failover_during_a_backlog_loses_and_repeats_nothing(sentinel: SentinelGroup) -> None:
    settings = QueueSettings(
        backend="redis",
        redis_mode="sentinel",
        redis_url="redis://sentinel/0",
        sentinel_addresses=sentinel.addresses,
        wait_replicas=1,
        wait_timeout_ms=2000,
        lease_ttl_s=2,
        socket_timeout_s=2,
        retry_backoff_s=0.1,
    )
    backlog = Backlog(settings, total=120)
    threads = [threading.Thread(target=backlog.produce)]
    threads += [threading.Thread(target=backlog.consume, args=(f"w{n}",)) for n in range(3)]
    for thread in threads:
        thread.start()
    try:
        deadline = time.monotonic() + 60
        while sum(backlog.confirmed_finishes.values()) < 20:
            assert time.monotonic() < deadline, "the backlog did not start moving"
            time.sleep(0.05)
        old = sentinel.primary_port()
        sentinel.server_on(old).kill()  # kill -9: no shutdown, the replicas keep what they acknowledged
        new = sentinel.wait_failover(old)
        threads[0].join(timeout=90)
        assert not threads[0].is_alive(), "the producer did not get every job accepted"
        checker: JobQueue = open_queue(settings)
        try:
            deadline = time.monotonic() + 90
            while True:
                records = {job_id: checker.get(job_id) for job_id in backlog.accepted.values()}
                if all(r is not None and r.status in TERMINAL for r in records.values()):
                    break
                assert time.monotonic() < deadline, {k: r.status if r else None for k, r in records.items()}
                time.sleep(0.2)
            terminal_events = {
                job_id: [e.status for e in checker.events(job_id) if e.status in TERMINAL] for job_id in records
            }
        finally:
            checker.close()
    finally:
        backlog.stop.set()
        for thread in threads:
            thread.join(timeout=30)

    assert new != old
    assert backlog.unavailable > 0  # the failover was felt, and ridden out
    assert len(backlog.accepted) == backlog.total  # every 202 accounted for
    assert len(set(backlog.accepted.values())) == backlog.total  # one job per key, even across the failover
    assert all(r is not None and r.status is Status.succeeded for r in records.values())
    assert all(events == [Status.succeeded] for events in terminal_events.values()), terminal_events
    # A finish the worker saw confirmed was never lost and redone by another worker.
    assert max(backlog.confirmed_finishes.values()) == 1
    assert set(backlog.confirmed_finishes) <= set(records)
