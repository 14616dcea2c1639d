"""The queue contract on a real 3-master Redis Cluster, through ``open_queue`` with ``redis_mode: cluster``.

The contract tests themselves are those of ``test_queue_contract`` (imported, not copied); only the
``make_queue`` fixture changes: every queue here is a ``RedisQueue`` over redis-py's ``RedisCluster``.
A multi-key command spanning slots would fail with ``CROSSSLOT`` and a script on the wrong node with
``MOVED``, so the suite passing is the check that every atomic step stays in one slot. The tests below
it check the cluster is really used: keys of different models live on different masters.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from redis.cluster import RedisCluster
from redis.crc import key_slot

from foundation.queue import keys
from foundation.queue.base import JobQueue
from foundation.queue.config import QueueSettings
from foundation.queue.factory import open_queue
from foundation.queue.redis.backend import RedisQueue
from tests.fixtures.redis_cluster import LocalCluster
from tests.integration import queue_support
from tests.integration.queue_support import new_record
from tests.integration.test_queue_contract import (  # noqa: F401  (collected here, on the cluster)
    test_a_release_says_why_in_its_event,
    test_cancel_before_claim,
    test_cancel_while_running_sets_the_flag,
    test_claim_only_from_hosted_models,
    test_concurrent_creates_with_one_key_make_one_job,
    test_depth_and_position,
    test_enqueue_claim_finish,
    test_events_are_ordered_and_resumable,
    test_heartbeats_expire,
    test_idempotent_enqueue,
    test_lapsed_lease_is_redelivered_and_the_stale_attempt_is_refused,
    test_lapsed_lease_on_the_last_attempt_fails_worker_lost,
    test_list_jobs_pages_newest_first,
    test_release_redelivers_without_using_up_an_attempt,
    test_renewed_lease_survives_many_lease_periods,
    test_retry_then_dead_letter_keeps_the_error,
    test_retry_waits_for_its_backoff,
    test_two_consumers_never_hold_one_job,
    test_unknown_ids,
    test_warm_model_first_without_starving_cold_ones,
)

queue = queue_support.queue  # uses the make_queue below


@pytest.fixture
def make_queue(redis_cluster_url: str) -> Iterator[Callable[..., JobQueue]]:
    """Queues on the emptied cluster; each call is another client (an API, a worker)."""
    opened: list[JobQueue] = []

    def make(**options: Any) -> JobQueue:
        carried = {name: options.pop(name) for name in list(options) if name in QueueSettings.model_fields}
        carried.setdefault("lease_ttl_s", 30.0)
        q = open_queue(QueueSettings(backend="redis", redis_mode="cluster", redis_url=redis_cluster_url, **carried))
        assert isinstance(q, RedisQueue)
        # Options the settings do not carry (e.g. starve_after_s) are the queue's own attributes.
        for name, value in options.items():
            assert hasattr(q, name), name
            setattr(q, name, value)
        opened.append(q)
        return q

    yield make
    for q in opened:
        q.close()


def _owner_ports(cluster: LocalCluster) -> dict[int, int]:
    """slot → port of the master that serves it, as the cluster itself reports."""
    client = cluster.node_clients()[0]
    try:
        owners: dict[int, int] = {}
        for start, end, master, *_ in client.execute_command("CLUSTER", "SLOTS"):
            for slot in range(int(start), int(end) + 1):
                owners[slot] = int(master[1])
        return owners
    finally:
        client.close()


def _models_on_every_master(cluster: LocalCluster) -> dict[int, str]:
    """One model id per master, chosen so its hash tag's slot is served by that master."""
    owners = _owner_ports(cluster)
    chosen: dict[int, str] = {}
    for i in range(1000):
        model = f"model-{i}"
        port = owners[key_slot(keys.job_stream(model).encode())]
        chosen.setdefault(port, model)
        if len(chosen) == len(cluster.nodes):
            return chosen
    raise AssertionError("no model ids cover every master")


def test_the_queue_talks_to_a_cluster_client(make_queue: Callable[..., JobQueue]) -> None:
    q = make_queue()
    assert isinstance(q, RedisQueue)
    assert isinstance(q._r, RedisCluster)
    assert len(q._r.get_primaries()) == 3


def test_each_model_pool_lives_on_the_master_of_its_slot(
    redis_cluster: LocalCluster, make_queue: Callable[..., JobQueue]
) -> None:
    q = make_queue()
    by_port = _models_on_every_master(redis_cluster)
    jobs = {port: q.enqueue(new_record(model=model)).record.id for port, model in by_port.items()}
    for node, client in zip(redis_cluster.nodes, redis_cluster.node_clients(), strict=True):
        try:
            model = by_port[node.port]
            here = set(client.keys("gw:{m:*"))
            # Every key of this model's pool is on this master, and no other model's pool is.
            assert keys.job_stream(model) in here
            assert keys.job_record(model, jobs[node.port]) in here
            assert keys.events_stream(model) in here
            assert {k.split("}")[0] + "}" for k in here} == {f"gw:{keys.pool_tag(model)}"}
        finally:
            client.close()
    # The worker side sees all three pools through the one client.
    claimed = set()
    while (claim := q.claim("w1", list(by_port.values()))) is not None:
        claimed.add(claim.job_id)
    assert claimed == set(jobs.values())
    assert {e.job_id for e in q.events()} == set(jobs.values())


def test_a_db_number_is_refused_on_a_cluster(redis_cluster_url: str) -> None:
    settings = QueueSettings(backend="redis", redis_mode="cluster", redis_url=redis_cluster_url + "/2")
    with pytest.raises(ValueError, match="database 2"):
        open_queue(settings)
