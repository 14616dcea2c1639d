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

from dataclasses import dataclass
from typing import Any

import redis.exceptions as rx
from redis.cluster import RedisCluster

from foundation.queue.errors import NotDurable

__all__ = ["Durability", "NotDurable", "probe"]


@dataclass(frozen=True)
class Durability:
    """What a commit waits for. ``replicas == 0`` and ``aof`` off: nothing (Redis' default)."""

    replicas: int = 0  # replicas that must acknowledge each commit
    aof: bool = False  # WAITAOF: also fsynced to the primary's AOF (and the replicas' AOF)
    timeout_ms: int = 1000

    @property
    def enabled(self) -> bool:
        return self.replicas > 0 or self.aof

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
        if self.aof:
            local, replicas = (int(n) for n in acked)
            if local >= 1 and replicas >= self.replicas:
                return
            got = f"{local} local AOF fsync(s) and {replicas} replica AOF(s)"
        else:
            replicas = int(acked)
            if replicas >= self.replicas:
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
