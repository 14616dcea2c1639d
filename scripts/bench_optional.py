"""The optional hot-path pieces, each against the plain path, in one run (issue 48; docs/benchmarks.md,
"Micro-optimizations off by default (issue 48)").

Each piece is a setting, off by default: ``api.fast_path``, ``queue.redis_wire``,
``queue.sqlite_group_commit`` (the API's figures) and ``worker.overlap_stage_write`` (the daemon's
pick-up). ``--before`` names a checkout of the commit before they became settings (every piece on, and
the worker's log lines written by a thread of their own): its servers and worker run beside this tree's,
so "before ÷ after" comes from the same run as the pieces' own ratios. ``--no-log-writer`` names that
checkout with its log writer left out (one line of worker/cli.py), the log writer's own arm.

API: ``scripts/bench_api.py``'s servers (``genworker api`` under uvicorn, one process each) and load
generator; one server per arm and backend, all up at once; closed-loop runs of ``--seconds``, arms in
turn, order rotated every round; medians of requests/s and of requests per server CPU-second (the second
moves less with the machine's load). Worker: ``scripts/bench_worker.py``'s ``daemon_pickup`` (one hosted
model, its own Redis) per arm, arms alternating every round; medians over rounds of each run's p50
pick-up, of its ratio to the bare-Streams pick-up taken after each job, and of claim → adapter.

Run: ``python scripts/bench_optional.py --before ../before --no-log-writer ../before-nolog > out.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from scripts.bench_api import _Api, _measure, _stop, _target  # noqa: E402
from scripts.bench_worker import daemon_pickup  # noqa: E402

# The API's arms by backend: settings on top of the defaults (every piece off).
API_ARMS: dict[str, dict[str, dict[str, dict[str, Any]]]] = {
    "sqlite": {
        "plain": {},
        "fast_path": {"api": {"fast_path": True}},
        "group_commit": {"queue": {"sqlite_group_commit": True}},
        "all": {"api": {"fast_path": True}, "queue": {"sqlite_group_commit": True}},
    },
    "redis": {
        "plain": {},
        "fast_path": {"api": {"fast_path": True}},
        "redis_wire": {"queue": {"redis_wire": True}},
        "all": {"api": {"fast_path": True}, "queue": {"redis_wire": True}},
    },
}
WORKER_ARMS: dict[str, dict[str, Any]] = {"plain": {}, "overlap_stage_write": {"overlap_stage_write": True}}


def _median(values: list[float]) -> float:
    return round(float(statistics.median(values)), 3)


def api_ab(rounds: int, seconds: float, before: Path | None) -> dict[str, Any]:
    from tests.fixtures.redis_server import start_redis

    tmp = Path(tempfile.mkdtemp(prefix="bench-optional-"))
    redis = start_redis(tmp / "redis-server")
    servers: dict[str, _Api] = {}
    try:
        for backend, arms in API_ARMS.items():
            url = redis.url if backend == "redis" else None
            for arm, extra in arms.items():
                servers[f"{backend}/{arm}"] = _Api(tmp, f"{backend}-{arm}", url, extra)
            if before is not None:
                servers[f"{backend}/before"] = _Api(tmp, f"{backend}-before", url, None, before)
        for api in servers.values():
            api.ready()
        targets: dict[str, dict[str, Any]] = {}
        for name, api in servers.items():
            targets[f"{name}/GET"] = _target(api.proc, api.port, "GET", f"/v1/generations/{api.gen_id}", api.token)
            targets[f"{name}/POST"] = _target(api.proc, api.port, "POST", "/v1/generations", api.token)
        extra_pids = {name: [redis.pid] if name.startswith("redis/") else [] for name in targets}
        for name, target in targets.items():  # warm-up: imports, caches, SQLite pages, connections
            _measure(target, 1.0, None, extra_pids[name])
        runs: dict[str, list[dict[str, Any]]] = {name: [] for name in targets}
        names = list(targets)
        for i in range(rounds):  # interleaved, order rotated and reversed: machine noise hits every arm alike
            order = names[i % len(names) :] + names[: i % len(names)]
            for name in reversed(order) if i % 2 else order:
                runs[name].append(_measure(targets[name], seconds, None, extra_pids[name]))
    finally:
        for api in servers.values():
            _stop(api.proc)
        redis.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    return {
        name: {
            "rps": _median([r["rps"] for r in samples]),
            "rps_per_cpu_s": _median([r["rps_per_cpu_s"] for r in samples if r.get("rps_per_cpu_s")]),
            "errors": sum(r["errors"] for r in samples),
            "rounds_rps": [round(r["rps"], 1) for r in samples],
        }
        for name, samples in runs.items()
    }


def worker_ab(rounds: int, jobs: int, before: Path | None, no_log_writer: Path | None) -> dict[str, Any]:
    arms: dict[str, tuple[dict[str, Any], Path | None]] = {name: (w, None) for name, w in WORKER_ARMS.items()}
    if before is not None:
        arms["before"] = ({}, before)
    if no_log_writer is not None:
        arms["before_no_log_writer"] = ({}, no_log_writer)
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in arms}
    names = list(arms)
    for i in range(rounds):
        order = names[i % len(names) :] + names[: i % len(names)]
        for name in reversed(order) if i % 2 else order:
            settings, tree = arms[name]
            runs[name].append(daemon_pickup(jobs, worker=settings, tree=tree))
    return {
        name: {
            "pickup_p50_ms": _median([r["pickup_p50_ms"] for r in samples]),
            "pickup_over_bare_streams": _median([r["pickup_p50_ms"] / r["raw_streams_pickup_p50_ms"] for r in samples]),
            "claim_to_adapter_p50_ms": _median([r["claim_to_adapter_p50_ms"] for r in samples]),
            "rounds_pickup_p50_ms": [r["pickup_p50_ms"] for r in samples],
        }
        for name, samples in runs.items()
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, help="a checkout of the commit before (every piece on)")
    parser.add_argument("--no-log-writer", type=Path, help="that checkout without its log writer")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=2.5)
    parser.add_argument("--jobs", type=int, default=40)
    parser.add_argument("--only", choices=["api", "worker"])
    args = parser.parse_args()
    load_before = os.getloadavg()[0]
    out: dict[str, Any] = {"rounds": args.rounds}
    if args.only in (None, "api"):
        out["api"] = api_ab(args.rounds, args.seconds, args.before)
    if args.only in (None, "worker"):
        out["worker"] = worker_ab(args.rounds, args.jobs, args.before, args.no_log_writer)
    out["load_average_1m"] = [round(load_before, 2), round(os.getloadavg()[0], 2)]
    json.dump(out, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
