"""Durable commits on Redis: ``WAIT`` / ``WAITAOF`` after each commit, on the commit's own connection.

Redis replicates asynchronously: a primary that dies right after answering a write may take that
write with it, and the replica promoted in its place never saw it (a 202 whose job is gone, a claim
another worker repeats with the same fencing token, a finish that never happened). ``WAIT n t``
blocks until ``n`` replicas acknowledged every write the *calling connection* made before it
(``WAITAOF l n t``, Redis ≥ 7.2: also fsynced to ``l`` local and ``n`` replica AOFs). So the wait must
travel on the commit's connection: one non-transactional pipeline of ``EVALSHA commit`` then ``WAIT``
(a pipeline holds one connection; on Cluster the ``WAIT`` names the node that owns the job's slot,
where the cluster pipeline sends the script too).

A commit that is in effect but not confirmed in time raises ``NotDurable``, a ``BackendUnavailable``:
the API answers 503 (the client re-sends with its Idempotency-Key, and the replay waits again before
its 202), the worker backs off. A replayed commit (``applied``, ``exists``) writes nothing, yet its
wait still covers the first run's writes: Redis records the replication offset on the connection after
every command, reads included, and ``WAIT`` waits for that offset.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import redis.exceptions as rx
from redis.cluster import RedisCluster

from foundation.queue.errors import NotDurable

__all__ = ["Durability", "NotDurable", "probe", "replicas_to_wait_for"]


@dataclass(frozen=True)
class Durability:
    """What a commit waits for. ``replicas == 0`` and ``aof`` off: nothing (Redis' default).

    ``replicas`` None (``queue.wait_replicas`` unset): as many as ``replicas_to_wait_for`` finds, asked
    by ``settled`` when the first commit needs to know, not at open: a process may start before its Redis
    does, and opening the queue never needed the server."""

    replicas: int | None = 0  # replicas that must acknowledge each commit (None: not settled yet)
    aof: bool = False  # WAITAOF: also fsynced to the primary's AOF (and the replicas' AOF)
    timeout_ms: int = 1000

    @property
    def enabled(self) -> bool:
        if self.replicas is None:
            raise RuntimeError("Durability.settled() first: the replicas to wait for are not known yet")
        return self.replicas > 0 or self.aof

    def settled(self, client: Any) -> Durability:
        """This, with ``replicas`` known (asked of the server when it was unset)."""
        if self.replicas is not None:
            return self
        return replace(self, replicas=replicas_to_wait_for(client, None))

    def queue_wait(self, pipe: Any, client: Any, key: str) -> None:
        """Append the wait to ``pipe``, after the commit it must cover (``key``: one of its keys)."""
        target: dict[str, Any] = {}
        if isinstance(client, RedisCluster):
            target["target_nodes"] = client.get_node_from_key(key)
        pipe.execute_command(*self.wait_command(), **target)

    def wait_command(self) -> tuple[Any, ...]:
        """The wait, as a raw command to send right after the commit it must cover."""
        if self.aof:
            return ("WAITAOF", 1, self.replicas, self.timeout_ms)
        return ("WAIT", self.replicas, self.timeout_ms)

    def check(self, acked: Any, job_id: str) -> None:
        """Raise ``NotDurable`` unless the wait's reply reached the required counts."""
        required = self.replicas or 0
        if self.aof:
            local, replicas = (int(n) for n in acked)
            if local >= 1 and replicas >= required:
                return
            got = f"{local} local AOF fsync(s) and {replicas} replica AOF(s)"
        else:
            replicas = int(acked)
            if replicas >= required:
                return
            got = f"{replicas} replica(s)"
        raise NotDurable(
            f"redis unavailable: the commit for job {job_id} is not confirmed durable within "
            f"{self.timeout_ms} ms ({got}; {self.replicas} replica(s) required)"
        )


def probe(client: Any, durability: Durability) -> None:
    """Fail at start, not at a job's first commit, when the server cannot give ``WAITAOF``
    (Redis < 7.2, or ``appendonly no``): ``ValueError`` naming the setting."""
    if not durability.aof:
        return
    try:
        client.execute_command("WAITAOF", 1, 0, 0)
    except rx.ResponseError as e:
        raise ValueError(
            f"queue.wait_aof needs Redis 7.2 or newer with appendonly yes on every primary; the server said: {e}"
        ) from None


def replicas_to_wait_for(client: Any, setting: int | None) -> int:
    """``queue.wait_replicas``, or when it is unset: 1 if the deployment has a replica now (on a Cluster,
    every primary has one: a shard without a replica could never confirm), else 0.

    Read once, at open: a replica that is added later is not waited for until the process restarts, and
    one that is gone later makes commits wait and fail (``NotDurable``) until it is back. Counted with
    ``WAIT 0 0`` on a connection that wrote nothing (it answers at once with the replicas online), not
    ``INFO``, which the least-privilege ACL (``-@dangerous``) refuses."""
    if setting is not None:
        return setting
    if isinstance(client, RedisCluster):
        answers = client.execute_command("WAIT", 0, 0, target_nodes=RedisCluster.PRIMARIES)
        counts = [int(n) for n in (answers.values() if isinstance(answers, dict) else [answers])]
    else:
        counts = [int(client.execute_command("WAIT", 0, 0))]
    return 1 if counts and min(counts) >= 1 else 0
