"""The API's operator surface: ``/healthz`` (the process answers) and ``/readyz`` (it can serve).

- ``/healthz`` answers 200 while the event loop runs; it touches no backend, so a Redis outage never
  makes an orchestrator restart every replica at once.
- ``/readyz`` answers 200 when the queue and the artifact store both answer a cheap read (a lookup of
  an id that never exists, a HEAD of a key that never exists), else 503 with a body naming the check
  that failed and the kind of failure (``timeout``, ``unavailable`` or ``error``). Both checks run
  concurrently, each bounded by ``CHECK_TIMEOUT_S``. The failure's own words (a backend's address, its
  endpoint, a driver's message) go to the log only: the probe needs no key, and whoever can reach it
  must not learn the cluster's layout from it.

Neither needs a key nor counts against a rate limit, and neither is in the public OpenAPI document:
like ``/metrics``, they are for probes inside the cluster, not for API users.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Literal

from fastapi import APIRouter, Depends
from fastapi.responses import JSONResponse
from pydantic import BaseModel

from api.context import ApiContext, context
from foundation.core.errors import GenworkerError
from foundation.queue.base import AsyncApiQueue
from foundation.stores.base import ArtifactStore

__all__ = ["CHECK_TIMEOUT_S", "Check", "Readiness", "check_readiness", "router"]

log = logging.getLogger("genworker.api.health")

# Per check: a backend slower than this to answer a trivial read is not fit to serve requests.
CHECK_TIMEOUT_S = 2.0
# Names that no record or object ever has (ids are ``gen_<hex>``, keys start ``generations/``).
_PROBE_JOB_ID = "readyz-probe"
_PROBE_KEY = "readyz/probe"


class Check(BaseModel):
    ok: bool
    reason: Literal["timeout", "unavailable", "error"] | None = None  # a closed vocabulary, never the error


class Readiness(BaseModel):
    status: str  # "ready" | "not_ready"
    checks: dict[str, Check]


async def _run_check(name: str, probe: Callable[[], Awaitable[object]], timeout_s: float) -> Check:
    reason: Literal["timeout", "unavailable", "error"]
    try:
        await asyncio.wait_for(probe(), timeout_s)
    except TimeoutError:
        reason, error = "timeout", f"no answer within {timeout_s:g} s"
    except GenworkerError as e:
        reason, error = "unavailable", f"{getattr(getattr(e, 'code', None), 'value', type(e).__name__)}: {e}"
    except Exception as e:  # a probe must answer 503, never 500, whatever the backend raised
        reason, error = "error", f"{type(e).__name__}: {e}"
    else:
        return Check(ok=True)
    log.warning("readiness check %s failed: %s", name, error, extra={"check": name, "reason": reason})
    return Check(ok=False, reason=reason)


async def check_readiness(queue: AsyncApiQueue, store: ArtifactStore, timeout_s: float = CHECK_TIMEOUT_S) -> Readiness:
    queue_check, store_check = await asyncio.gather(
        _run_check("queue", lambda: queue.get(_PROBE_JOB_ID), timeout_s),
        _run_check("store", lambda: asyncio.to_thread(store.exists, _PROBE_KEY), timeout_s),  # a sync store
    )
    checks = {"queue": queue_check, "store": store_check}
    return Readiness(status="ready" if all(c.ok for c in checks.values()) else "not_ready", checks=checks)


router = APIRouter(include_in_schema=False)


@router.get("/healthz")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


_CONTEXT = Depends(context)


@router.get("/readyz")
async def readyz(ctx: ApiContext = _CONTEXT) -> JSONResponse:
    readiness = await check_readiness(ctx.queue, ctx.store)
    status = 200 if readiness.status == "ready" else 503
    return JSONResponse(readiness.model_dump(exclude_none=True), status_code=status)
