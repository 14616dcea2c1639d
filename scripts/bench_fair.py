"""Fair share's cost (``foundation/queue/fairness.py``): the claim with fair share on, next to plain FIFO
(``queue.fair.enabled: false``) in the same run, on Redis (a loopback redis-server this script starts) and
SQLite, with the same backlog laid out three ways: 1 project, 10 projects and 1,000 projects (10 jobs
each at full size); FIFO and fair share serve two models of one store, claimed in alternating batches,
so both meet the same machine load. Per case: the claim call's p50/p99 (the pick-up of a queued job by a busy worker)
and no-op jobs/s (claim → finish cycles of one worker over the backlog), over the first ``claims`` jobs
of it. ``ratios``: fair ÷ FIFO per layout, and 1,000 ÷ 10 projects under fair share (flat in projects).

``python scripts/bench_fair.py [--quick]`` prints JSON; ``scripts/bench_queue.py`` runs it as ``fairness``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import redis

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from foundation.core.contract import GenerationRecord, Status  # noqa: E402
from foundation.queue.base import JobQueue, Outcome  # noqa: E402
from foundation.queue.fairness import FairShare  # noqa: E402
from foundation.queue.redis.backend import RedisQueue  # noqa: E402
from foundation.queue.sqlite.backend import SqliteQueue  # noqa: E402
from tests.integration.queue_support import new_record  # noqa: E402

MODEL = "bench-model"
DONE = Outcome(status=Status.succeeded)
BATCH = 50  # claims of one side before the other side's turn


def _record(project: str, model: str) -> GenerationRecord:
    return new_record(model, project)


def _summary(claim_s: list[float], cycles_s: float) -> dict[str, Any]:
    ordered = sorted(claim_s)
    return {
        "claim_p50_ms": round(statistics.median(ordered) * 1000, 3),
        "claim_p99_ms": round(ordered[round(0.99 * (len(ordered) - 1))] * 1000, 3),
        "jobs_per_s": round(len(claim_s) / cycles_s, 1),
    }


def _pair(sides: dict[str, tuple[JobQueue, str]], projects: int, per_project: int, claims: int) -> dict[str, Any]:
    """Each side (a queue and the model it serves) gets ``projects`` × ``per_project`` jobs (round by round,
    as many tenants would); then one worker runs ``claims`` claim → finish cycles per side, the sides
    taking turns in batches of 50 so both meet the same machine load. Per side: the claim call's p50/p99
    and the cycles' jobs/s."""
    for q, model in sides.values():
        for _ in range(per_project):
            for p in range(projects):
                q.enqueue(_record(f"p{p:04d}", model))
    claim_s: dict[str, list[float]] = {name: [] for name in sides}
    cycles_s = dict.fromkeys(sides, 0.0)
    while any(len(c) < claims for c in claim_s.values()):
        for name, (q, model) in sides.items():
            started = time.perf_counter()
            for _ in range(min(BATCH, claims - len(claim_s[name]))):
                t0 = time.perf_counter()
                claim = q.claim("bench-worker", [model])
                claim_s[name].append(time.perf_counter() - t0)
                assert claim is not None
                assert q.finish(claim, DONE)
            cycles_s[name] += time.perf_counter() - started
    return {name: {"queued": projects * per_project, **_summary(claim_s[name], cycles_s[name])} for name in sides}


def _layouts(quick: bool) -> dict[str, tuple[int, int]]:
    depth = 2_000 if quick else 10_000
    return {"1_project": (1, depth), "10_projects": (10, depth // 10), "1000_projects": (1000, depth // 1000)}


def _backend_cases(open_queue: Any, reset: Any, quick: bool) -> dict[str, Any]:
    """FIFO and fair share side by side per layout: two models of one store, one per setting."""
    claims = 500 if quick else 2_000
    out: dict[str, Any] = {}
    for layout, (projects, per_project) in _layouts(quick).items():
        reset()
        fifo, fair = open_queue(FairShare(enabled=False)), open_queue(FairShare())
        try:
            pair = _pair(
                {"fifo": (fifo, f"{MODEL}-fifo"), "fair": (fair, f"{MODEL}-fair")}, projects, per_project, claims
            )
        finally:
            fifo.close()
            fair.close()
        for mode, figures in pair.items():
            out[f"{layout}/{mode}"] = figures
    return out


def _ratios(cases: dict[str, Any]) -> dict[str, float]:
    ratios = {}
    for layout in ("1_project", "10_projects", "1000_projects"):
        fifo, fair = cases[f"{layout}/fifo"], cases[f"{layout}/fair"]
        ratios[f"{layout}/claim_p50_fair_over_fifo"] = round(fair["claim_p50_ms"] / fifo["claim_p50_ms"], 3)
        ratios[f"{layout}/jobs_per_s_fifo_over_fair"] = round(fifo["jobs_per_s"] / fair["jobs_per_s"], 3)
    one_k, ten = cases["1000_projects/fair"], cases["10_projects/fair"]
    ratios["fair/claim_p50_1000_over_10_projects"] = round(one_k["claim_p50_ms"] / ten["claim_p50_ms"], 3)
    return ratios


def run(port: int | None = None, quick: bool = False) -> dict[str, Any]:
    """Both backends; Redis on ``port`` (a server of the caller's), else on one started here."""
    result: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="bench-fair-") as tmp:
        proc = None
        if port is None:
            from scripts.bench_queue import _start_redis  # the one way the benches start a server

            proc, port = _start_redis(Path(tmp))
        try:
            client = redis.Redis(port=port, decode_responses=True)
            url = f"redis://127.0.0.1:{port}/0"
            redis_cases = _backend_cases(lambda fair: RedisQueue(url, fair=fair), client.flushall, quick)
            result["redis"] = {"cases": redis_cases, "ratios": _ratios(redis_cases)}
        finally:
            if proc is not None:
                proc.terminate()
                proc.wait(timeout=10)
        files = iter(range(1000))
        path = Path(tmp) / "fair.db"

        def fresh_file() -> None:  # both sides of a layout share one file, as two models of one queue
            nonlocal path
            path = Path(tmp) / f"fair-{next(files)}.db"

        sqlite_cases = _backend_cases(lambda fair: SqliteQueue(path, durable=False, fair=fair), fresh_file, quick)
        result["sqlite"] = {"cases": sqlite_cases, "ratios": _ratios(sqlite_cases)}
    return result


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    print(json.dumps(run(quick=parser.parse_args().quick), indent=2))
