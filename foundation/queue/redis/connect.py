"""Redis clients for every deployment shape the queue supports: one server, Redis Cluster, Sentinel.

``redis_client(settings)`` is the one place that turns ``QueueSettings`` into a connected client
(``decode_responses=True``, as ``RedisQueue`` requires), so the API tier (keys, rate limits) and the
workers reach Redis the same way:

- ``single``: ``redis_url`` as is (``redis://`` or ``rediss://``, ``user:password@``, ``/db``).
- ``cluster``: redis-py's ``RedisCluster`` seeded with ``redis_url`` and ``cluster_nodes``. It follows
  ``MOVED``/``ASK`` and runs each Lua script on the node that owns its keys' slot; the queue keeps every
  atomic step within one slot (hash tag ``{m:<model>}``), so the scripts run unchanged. Cluster has no
  databases: a ``/db`` other than 0 is refused.
- ``sentinel``: the current master of ``sentinel_master``, asked of ``sentinel_addresses``; the client
  re-asks after a failover. The URL gives only scheme (TLS), credentials and db.

TLS is on when the URL scheme is ``rediss``; ``tls_*`` add a CA bundle and a client certificate. ACL
credentials come from the URL, overridden by ``redis_username`` / ``redis_password``.

A Cluster client connects while it is built: no reachable seed raises ``BackendUnavailable``, as
every later call does when Redis cannot answer. A setting that cannot work raises ``ValueError``.
"""

from __future__ import annotations

from typing import Any, TypeAlias
from urllib.parse import unquote, urlsplit, urlunsplit

import redis
from redis.cluster import ClusterNode, RedisCluster
from redis.sentinel import Sentinel

from foundation.queue.config import QueueSettings
from foundation.queue.unavailable import redis_unavailable

__all__ = ["RedisClient", "parse_address", "redis_client"]

RedisClient: TypeAlias = "redis.Redis | RedisCluster"

_DEFAULT_PORT = 6379
_SENTINEL_PORT = 26379


def parse_address(address: str, default_port: int = _DEFAULT_PORT) -> tuple[str, int]:
    """``host:port`` (or ``[v6]:port``, or a bare host) → ``(host, port)``."""
    text = address.strip()
    if not text:
        raise ValueError("empty Redis address")
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        port = rest.removeprefix(":")
        return host, int(port) if port else default_port
    host, sep, port = text.rpartition(":")
    if not sep:
        return text, default_port
    return host, int(port)


@redis_unavailable
def redis_client(settings: QueueSettings, url: str | None = None) -> RedisClient:
    """A client for ``url`` (default: ``settings.redis_url``) in the settings' mode."""
    url = url or settings.redis_url
    parts = urlsplit(url)
    if parts.scheme not in ("redis", "rediss"):
        raise ValueError(f"queue.redis_url must start with redis:// or rediss://, got {parts.scheme or url!r}")
    common = _connection_kwargs(settings, parts.scheme == "rediss", parts.username, parts.password)
    if settings.redis_mode == "cluster":
        return _cluster(settings, parts.hostname, parts.port, _db_of(parts.path), common)
    if settings.redis_mode == "sentinel":
        return _sentinel(settings, _db_of(parts.path), common)
    # Credentials travel as keyword arguments (settings over URL): from_url lets the URL's win.
    return redis.Redis.from_url(_without_credentials(url), **common)


def _without_credentials(url: str) -> str:
    parts = urlsplit(url)
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=host))


def _db_of(path: str) -> int:
    db = path.strip("/")
    try:
        return int(db) if db else 0
    except ValueError:
        raise ValueError(f"the Redis URL's path must be a database number, got {path!r}") from None


def _connection_kwargs(settings: QueueSettings, tls: bool, user: str | None, password: str | None) -> dict[str, Any]:
    """Keyword arguments every connection of the client gets (credentials, timeouts, TLS)."""
    kwargs: dict[str, Any] = {
        "decode_responses": True,
        # Bytes that are not UTF-8 (a stream entry written by something else) must not crash a read.
        "encoding_errors": "replace",
        "socket_timeout": settings.socket_timeout_s,
        "socket_connect_timeout": settings.connect_timeout_s,
    }
    username = settings.redis_username or (unquote(user) if user else None)
    secret = settings.redis_password.get_secret_value() if settings.redis_password else None
    secret = secret or (unquote(password) if password else None)
    if username:
        kwargs["username"] = username
    if secret:
        kwargs["password"] = secret
    if tls:
        kwargs.update(_tls_kwargs(settings))
    return kwargs


def _tls_kwargs(settings: QueueSettings) -> dict[str, Any]:
    tls: dict[str, Any] = {"ssl_check_hostname": settings.tls_check_hostname}
    if settings.tls_ca_file:
        tls["ssl_ca_certs"] = settings.tls_ca_file
    if settings.tls_cert_file:
        tls["ssl_certfile"] = settings.tls_cert_file
    if settings.tls_key_file:
        tls["ssl_keyfile"] = settings.tls_key_file
    return tls


def _cluster(
    settings: QueueSettings, host: str | None, port: int | None, db: int, common: dict[str, Any]
) -> RedisCluster:
    if db != 0:
        raise ValueError(f"Redis Cluster has only database 0; queue.redis_url names database {db}")
    # redis-py's cluster and sentinel constructors are untyped.
    seeds = [ClusterNode(host or "127.0.0.1", port or _DEFAULT_PORT)]
    seeds += [ClusterNode(*parse_address(a)) for a in settings.cluster_nodes]
    tls = "ssl_check_hostname" in common
    return RedisCluster(startup_nodes=seeds, ssl=tls, **common)


def _sentinel(settings: QueueSettings, db: int, common: dict[str, Any]) -> redis.Redis:
    if not settings.sentinel_addresses:
        raise ValueError("queue.redis_mode is sentinel but queue.sentinel_addresses is empty")
    sentinels = [parse_address(a, _SENTINEL_PORT) for a in settings.sentinel_addresses]
    tls = "ssl_check_hostname" in common
    # The sentinels get the same TLS and timeouts as the master, but their own credentials.
    own: dict[str, Any] = {k: v for k, v in common.items() if k not in ("username", "password", "decode_responses")}
    if settings.sentinel_username:
        own["username"] = settings.sentinel_username
    if settings.sentinel_password:
        own["password"] = settings.sentinel_password.get_secret_value()
    if tls:
        own["ssl"] = True
    manager = Sentinel(sentinels, sentinel_kwargs=own)
    client: redis.Redis = manager.master_for(settings.sentinel_master, db=db, ssl=tls, **common)
    return client
