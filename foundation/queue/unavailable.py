"""Client-library errors that mean "the backend cannot answer now", translated at the queue's seam.

Each backend wraps its public methods (and its open path, when it connects eagerly) in one helper:
``redis_unavailable`` or ``sqlite_unavailable``, usable as a decorator or a ``with`` block. What they
translate comes out as ``BackendUnavailable`` (a ``TransientError``: the API answers 503, the worker
backs off) with the library's exception as ``__cause__``; everything else passes through unchanged,
so a bug still looks like a bug. Callers above the queue never import redis or sqlite3 to decide.

============================================  =========================================================
raised by the client                          why it is "unavailable", not a bug
============================================  =========================================================
redis ``ConnectionError`` (and subclasses)    refused, reset, TLS or ACL refusal, still loading its
                                              data (``BusyLoadingError``), no master from sentinels
redis ``TimeoutError``                        no answer within the socket timeout
redis ``ReadOnlyError``                       talking to a replica during a failover
redis ``OutOfMemoryError``                    ``maxmemory`` reached: writes refused until memory frees
redis ``ClusterError``, ``TryAgainError``     a cluster resharding, failing over or partly down
``ResponseError`` starting ``OOM``, ``BUSY``, the same conditions, as a Lua script reports them
``LOADING``, ``READONLY``, ``MASTERDOWN``,
``CLUSTERDOWN``, ``TRYAGAIN``, ``NOREPLICAS``
``RedisClusterException`` at connect          no seed node reachable, or slots not covered
builtin ``ConnectionError``, ``TimeoutError`` a socket error that escaped the client's own wrapping
``sqlite3.OperationalError``                  the file is locked past ``busy_timeout``, cannot be
                                              opened, or the disk failed (the SQL itself is static)
============================================  =========================================================
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from contextlib import ContextDecorator
from types import TracebackType

import redis.exceptions as rx

from foundation.core.errors import BackendUnavailable, short_message

__all__ = ["redis_unavailable", "sqlite_unavailable"]

_REDIS_DOWN: tuple[type[BaseException], ...] = (
    rx.ConnectionError,
    rx.TimeoutError,
    rx.ReadOnlyError,
    rx.OutOfMemoryError,
    rx.ClusterError,  # ClusterDownError, MasterDownError, "TTL exhausted" while slots move
    rx.TryAgainError,
    rx.SlotNotCoveredError,
    ConnectionError,
    TimeoutError,
)
# First word of an error reply that means "not now" (a script's redis.call reports it this way).
_REDIS_DOWN_REPLIES = frozenset(
    {"OOM", "BUSY", "LOADING", "READONLY", "MASTERDOWN", "CLUSTERDOWN", "TRYAGAIN", "NOREPLICAS"}
)
_CLUSTER_DOWN_TEXT = ("cannot be connected", "not covered")


def _redis_down(exc: BaseException) -> bool:
    if isinstance(exc, _REDIS_DOWN):
        return True
    if isinstance(exc, rx.ResponseError):
        return str(exc).split(" ", 1)[0] in _REDIS_DOWN_REPLIES
    if isinstance(exc, rx.RedisClusterException):
        return any(text in str(exc) for text in _CLUSTER_DOWN_TEXT)
    return False


def _sqlite_down(exc: BaseException) -> bool:
    return isinstance(exc, sqlite3.OperationalError)


class _Translate(ContextDecorator):
    """Re-raise what ``is_down`` accepts as ``BackendUnavailable``. Stateless: one instance is shared
    by every thread and every decorated method."""

    def __init__(self, backend: str, is_down: Callable[[BaseException], bool]) -> None:
        self._backend = backend
        self._is_down = is_down

    def __enter__(self) -> None:
        return None

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc is not None and not isinstance(exc, BackendUnavailable) and self._is_down(exc):
            message = f"{self._backend} unavailable: {type(exc).__name__}: {short_message(exc)}"
            raise BackendUnavailable(message) from exc


redis_unavailable = _Translate("redis", _redis_down)
sqlite_unavailable = _Translate("sqlite", _sqlite_down)
