"""Soak: 3 ``genworker worker`` + 2 ``genworker api`` processes on one redis-server and one SeaweedFS.

Closed loop: ``--clients`` threads each submit one tiny ``fast`` job (random model, ratio, duration,
seed, audio) through one of the API replicas and poll it to a terminal status, until ``--jobs`` were
submitted or ``--time-limit-s`` passed. Cancels and duplicate Idempotency-Keys (sequential and
concurrent, across replicas) are mixed in. Reports:

- jobs lost (accepted with 202 but missing or not terminal by the end): must be 0;
- duplicated terminal records (a job with more than one terminal event, or one idempotency key that
  produced two ids): must be 0;
- succeeded jobs whose objects are missing in S3 or differ in size: must be 0;
- p50/p99 end-to-end (record ``finished_at - created_at``) and error counts by code.

Bounded in time: submission stops at ``--time-limit-s``; polling stops ``--drain-s`` later. With
``--faults`` submissions are spread over one round of faults (``4 x (--fault-interval-s + 5)`` seconds)
and the last ``--clients`` jobs are held until every fault kind has been injected, so each kind meets jobs
in flight however fast the fleet runs.

``--faults`` (``scripts/soak_faults.py``): the fleet runs on a Sentinel deployment (primary, two
replicas, three sentinels; ``wait_replicas: 1``) and a restartable SeaweedFS, serving the test-only
``instant-wan`` model (no denoising: the soak measures the queue, the workers and the stores). Every
``--fault-interval-s`` one fault is injected: ``kill -9`` of a worker, a Redis stall, a failover
(``kill -9`` of the primary), a SeaweedFS restart. Every create carries an Idempotency-Key and is
re-sent on 5xx or a refused connection, as a client should. Also reported, and required to be 0: jobs
left ``running``, 202s not accounted for (a key answered with two ids, or an id never seen terminal),
objects in the bucket no record points at after the sweep (``orphaned_objects``).

``--projects N`` (5 in ``make soak``): the jobs go to N projects, one key each, one of them queueing 10x
as many as each other (``scripts/soak_faults.py``); the report gives each project's p95 wait, and no
project's p95 head wait (from being its project's oldest queued job to its start) may be above 3x the
median project's (``starved_projects``, required empty).

    .venv/bin/python scripts/soak.py --jobs 1000 --out var/soak.json
    .venv/bin/python scripts/soak.py --faults --jobs 10000 --clients 16 --out var/soak-faults.json
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import os
import random
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from foundation.queue.config import QueueSettings  # noqa: E402
from foundation.settings import settings_env  # noqa: E402
from tests.fixtures.redis_server import start_redis  # noqa: E402
from tests.fixtures.seaweed import SeaweedServer, running_seaweed  # noqa: E402

TERMINAL = {"succeeded", "failed", "canceled"}
TINY_MODELS = ["tiny-wan", "tiny-ltx2"]
FAULT_MODELS = ["instant-wan"]
RESEND_FOR_S = 120.0  # how long a create is re-sent on 5xx or a refused connection (--faults)


@dataclass
class Submitted:
    gid: str
    key: str | None
    model: str
    cancel: bool = False
    project: str = "soak"


@dataclass
class Tally:
    lock: threading.Lock = field(default_factory=threading.Lock)
    submitted: list[Submitted] = field(default_factory=list)
    rejected: Counter[str] = field(default_factory=Counter)
    idem_ids: dict[str, set[str]] = field(default_factory=dict)
    http_5xx: int = 0
    resends: int = 0


@dataclass(frozen=True)
class Plan:
    """What one soak run uses: the models, whether clients re-send, the queue's settings."""

    models: list[str]
    faults: bool
    queue: QueueSettings


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def base_env(plan: Plan, weed: SeaweedServer, models_dir: Path, data_dir: Path, catalog: Path | None) -> dict[str, str]:
    settings: dict[str, Any] = {
        "data_dir": str(data_dir),
        "queue": plan.queue.model_dump(mode="json", exclude_defaults=True),
        "store": {
            "backend": "s3",
            "s3_endpoint_url": weed.endpoint,
            "s3_bucket": weed.bucket,
            "s3_region": weed.region,
            "s3_access_key_id": weed.access_key,
            "s3_secret_access_key": weed.secret_key,
        },
        "models": {"tiny_models_dir": str(models_dir)},
        "worker": {"hosted_models": plan.models, "preload": plan.models, "heartbeat_s": 1},
        "encoder": {"preset": "ultrafast", "threads": 1},
        "api": {"rate_limit_per_s": 100000, "rate_limit_burst": 100000},
        # One webhook server key for every API replica (the API refuses to start on Redis without it).
        "webhooks": {"secret_key": base64.urlsafe_b64encode(os.urandom(32)).decode("ascii")},
    }
    if catalog is not None:
        settings["catalog_path"] = str(catalog)
    if plan.faults:
        settings["worker"].update({"reclaim_interval_s": 1, "max_backoff_s": 1})
    return {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT), **settings_env(settings)}


def create_key(env: dict[str, str], project: str = "soak") -> str:
    """A key of ``project`` in the fleet's key store (the settings in ``env`` name it: Redis beside the queue)."""
    cmd = [sys.executable, "-m", "genworker.cli", "keys", "create", "--project", project]
    cmd += ["--scope", "generations:write", "--scope", "generations:read"]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120, check=True)
    return done.stdout.strip()


def wait_available(urls: list[str], models: list[str], timeout_s: float = 300) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            ok = 0
            for url in urls:
                data = httpx.get(f"{url}/v1/models", timeout=5).json()["data"]
                ok += all(any(m["id"] == mid and m["available"] for m in data) for mid in models)
            if ok == len(urls):
                return
        except (httpx.HTTPError, KeyError, ValueError):
            pass
        time.sleep(1)
    raise RuntimeError(f"models not available within {timeout_s} s")


def random_body(rng: random.Random, catalog: Any, models: list[str]) -> dict[str, Any]:
    model = rng.choice(models)
    spec = catalog.get(model)
    params: dict[str, Any] = {
        "resolution": "144p",
        "ratio": rng.choice(spec.ratios),
        "duration_seconds": rng.choice([d for d in spec.durations if d <= 2]),
        "seed": rng.randrange(2**31),
    }
    if spec.audio:
        params["audio"] = rng.random() < 0.5
    prompt = rng.choice(["a fox", "rain on a window", "城市夜景", "waves ✨", "a lighthouse at dusk"])
    return {
        "model": model,
        "mode": "text_to_video",
        "variant": "fast",
        "parameters": params,
        "input": {"prompt": prompt},
    }


def submit_one(
    i: int, urls: list[str], token: str, catalog: Any, tally: Tally, seed: int, plan: Plan, project: str = "soak"
) -> str | None:
    """Create one job (maybe with replays of its Idempotency-Key, maybe canceled); its id."""
    rng = random.Random(seed * 1_000_003 + i)
    body = random_body(rng, catalog, plan.models)
    headers = {"Authorization": f"Bearer {token}"}
    roll = rng.random()
    # Under faults every create carries a key: a client that re-sends without one may create twice.
    key = f"soak-{seed}-{i}" if plan.faults or roll < 0.15 else None
    cancel = 0.15 <= roll < 0.22
    sends = 1
    if key is not None:
        headers["Idempotency-Key"] = key
        sends = 3 if 0.10 <= roll < 0.15 else 2 if roll < 0.10 else 1  # sequential replays, or three at once
    with httpx.Client(timeout=30) as c:

        def post(n: int) -> httpx.Response | None:
            give_up = time.monotonic() + (RESEND_FOR_S if plan.faults else 0)
            while True:
                try:
                    r = c.post(f"{urls[(i + n) % len(urls)]}/v1/generations", json=body, headers=headers)
                except httpx.TransportError:
                    r = None
                if r is not None and r.status_code >= 500:
                    with tally.lock:
                        tally.http_5xx += 1
                if (r is not None and r.status_code < 500) or time.monotonic() >= give_up:
                    return r
                with tally.lock:
                    tally.resends += 1
                time.sleep(0.5)

        if sends == 3:
            with ThreadPoolExecutor(3) as pool:
                responses = list(pool.map(post, range(3)))
        else:
            responses = [post(n) for n in range(sends)]
        ok = [r for r in responses if r is not None and r.status_code in (200, 201, 202)]
        if not ok:
            first = responses[0]
            with tally.lock:
                tally.rejected[f"{first.status_code}:{first.text[:80]}" if first else "no answer"] += 1
            return None
        gid = ok[0].json()["id"]
        if cancel:
            with contextlib.suppress(httpx.TransportError):  # the job then simply runs
                c.post(f"{urls[i % len(urls)]}/v1/generations/{gid}/cancel", headers=headers)
        with tally.lock:
            tally.submitted.append(Submitted(gid, key, body["model"], cancel, project))
            if key is not None:
                tally.idem_ids.setdefault(key, set()).update(r.json()["id"] for r in ok)
        return str(gid)


GONE_AFTER_S = 30.0  # an accepted job that answers 404 this long is lost (its record is gone)


def poll_all(urls: list[str], token: str, gids: list[str], deadline: float) -> dict[str, dict[str, Any]]:
    """Poll until each job is terminal, the deadline passes, or it answered 404 for ``GONE_AFTER_S``
    (lost: a client stuck on it would stop the closed loop; the report counts it as lost)."""
    final: dict[str, dict[str, Any]] = {}
    pending = list(gids)
    missing_since: dict[str, float] = {}
    headers = {"Authorization": f"Bearer {token}"}
    with httpx.Client(timeout=30, headers=headers) as c:
        while pending and time.monotonic() < deadline:
            still = []
            for n, gid in enumerate(pending):
                try:
                    r = c.get(f"{urls[n % len(urls)]}/v1/generations/{gid}")
                except httpx.TransportError:
                    still.append(gid)
                    continue
                if r.status_code == 200 and r.json()["status"] in TERMINAL:
                    final[gid] = r.json()
                    continue
                if r.status_code != 404:
                    missing_since.pop(gid, None)
                elif time.monotonic() - missing_since.setdefault(gid, time.monotonic()) > GONE_AFTER_S:
                    continue  # gone for good: reported as lost
                still.append(gid)
            pending = still
            if pending:
                time.sleep(0.25)
    return final


@dataclass
class StoreCheck:
    missing: int = 0  # succeeded jobs with a missing or short object
    duplicated: int = 0  # jobs with more than one terminal event
    running: int = 0  # accepted jobs whose record is still running (or queued) at the end
    swept: int = 0  # objects the final sweep removed (left by faults, pointed at by no record)
    orphaned: list[str] = field(default_factory=list)  # objects under generations/ no record points at, after it


def check_store(weed: SeaweedServer, gids: list[str], queue_settings: QueueSettings) -> StoreCheck:
    """Read every accepted job back from the queue and every object from the bucket."""
    from foundation.queue.factory import open_queue

    s3 = weed.client()
    queue = open_queue(queue_settings)
    check = StoreCheck()
    referenced: set[str] = set()
    try:
        for gid in gids:
            terminals = [e for e in queue.events(gid) if e.status.value in TERMINAL]
            check.duplicated += int(len(terminals) > 1)
            record = queue.get(gid)
            if record is None or record.status.value not in TERMINAL:
                check.running += int(record is not None)
                continue
            referenced.update(a.key for a in record.artifacts)
            if record.status.value != "succeeded":
                continue
            if not record.artifacts:
                check.missing += 1
            for art in record.artifacts:
                try:
                    head = s3.head_object(Bucket=weed.bucket, Key=art.key)
                    check.missing += int(head["ContentLength"] != art.bytes)
                except Exception:  # any refusal means the artifact is not there
                    check.missing += 1
    finally:
        queue.close()
    check.swept = sweep_objects(weed, queue_settings)
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=weed.bucket, Prefix="generations/"):
        check.orphaned += [o["Key"] for o in page.get("Contents", []) if o["Key"] not in referenced]
    return check


def sweep_objects(weed: SeaweedServer, queue_settings: QueueSettings) -> int:
    """One pass of the workers' sweeper over the bucket, every job being terminal now (so no age
    bound is needed): what the faults left behind (a killed worker's upload, one cut off by a store
    restart) goes; what a record points at stays. How many objects it removed."""
    from foundation.queue.factory import open_queue
    from foundation.stores.factory import open_store
    from worker.sweeper import Sweeper

    queue = open_queue(queue_settings)
    store = open_store(weed.store_settings(), data_dir=Path(tempfile.mkdtemp(prefix="soak-sweep-")))
    try:
        return Sweeper(queue, store, Path("/nonexistent"), min_age_s=0).sweep_objects()
    finally:
        queue.close()


def seconds(rec: dict[str, Any]) -> float:
    start = datetime.fromisoformat(rec["created_at"])
    end = datetime.fromisoformat(rec["finished_at"])
    return (end - start).total_seconds()


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def run(args: argparse.Namespace) -> dict[str, Any]:
    from foundation.core.catalog import load_catalog
    from scripts.soak_faults import FAULTS, Fleet, Injector, project_names, project_of, start_redis_group
    from tests.integration.worker_harness import write_test_catalog
    from tests.reliability.support import RestartableSeaweed

    work = Path(tempfile.mkdtemp(prefix="genworker-soak-"))
    logs = work / "logs"
    logs.mkdir()
    injector: Injector | None = None
    with ExitStack() as stack:
        catalog_path: Path | None = None
        if args.faults:
            group = start_redis_group(work / "redis")
            stack.callback(group.stop)
            restartable = RestartableSeaweed(work / "seaweed")
            weed = restartable.start()
            stack.callback(restartable.stop)
            catalog_path = write_test_catalog(work / "catalog.yaml")
            queue = QueueSettings(
                backend="redis",
                redis_mode="sentinel",
                redis_url="redis://sentinel/0",
                sentinel_addresses=group.addresses,
                wait_replicas=1,
                lease_ttl_s=5,  # longer than a stall (3 s): a stall alone never lapses a live lease
                socket_timeout_s=2,
                retry_backoff_s=0.2,
            )
            plan = Plan(FAULT_MODELS, True, queue)
        else:
            redis = start_redis(work / "redis", "--appendonly", "yes")
            stack.callback(redis.stop)
            weed = stack.enter_context(running_seaweed(work / "seaweed"))
            plan = Plan(TINY_MODELS, False, QueueSettings(backend="redis", redis_url=redis.url))
        catalog = load_catalog(catalog_path)
        models_dir = Path(args.models_dir) if args.models_dir else work / "models"
        if not args.models_dir:
            from pipelines.tiny.builders import build_all

            build_all(models_dir)
        env = base_env(plan, weed, models_dir, work / "data", catalog_path)
        projects = project_names(args.projects)
        tokens = {project: create_key(env, project) for project in projects}
        fleet = Fleet(env, logs, args.workers, args.apis)
        stack.callback(fleet.stop)
        urls = fleet.start(free_port)
        wait_available(urls, plan.models)
        if args.faults:
            injector = Injector(fleet, group, restartable, free_port, args.fault_interval_s, seed=args.seed)
            faults = threading.Thread(target=injector.run, daemon=True)
            faults.start()
        tally = Tally()
        started = time.monotonic()
        submit_deadline = started + args.time_limit_s
        final: dict[str, dict[str, Any]] = {}
        counter = iter(range(args.jobs))
        counter_lock = threading.Lock()

        # With faults, every kind must meet jobs in flight however fast the fleet is: submissions are spread
        # over about one round of faults, and the last ``--clients`` jobs wait until each kind has come.
        spread_s = len(FAULTS) * (args.fault_interval_s + 5.0) if injector is not None else 0.0

        def client_loop() -> None:
            while time.monotonic() < submit_deadline:
                with counter_lock:
                    i = next(counter, None)
                if i is None:
                    return
                if injector is not None:
                    paced = started + spread_s * i / args.jobs
                    while time.monotonic() < min(paced, submit_deadline):
                        time.sleep(0.05)
                    while i >= args.jobs - args.clients and not injector.covered():
                        if time.monotonic() >= submit_deadline:
                            break
                        time.sleep(0.2)
                project = project_of(i, projects)
                sub = submit_one(i, urls, tokens[project], catalog, tally, args.seed, plan, project)
                if sub is not None:
                    final.update(poll_all(urls, tokens[project], [sub], submit_deadline + args.drain_s))

        # Daemon threads rather than a pool: on SIGTERM the ExitStack unwinds (stopping every server) at once,
        # where a pool's exit would first wait for clients that poll on until the drain deadline.
        client_errors: list[BaseException] = []

        def client() -> None:
            try:
                client_loop()
            except BaseException as exc:
                client_errors.append(exc)

        clients = [threading.Thread(target=client, name=f"soak-client-{i}", daemon=True) for i in range(args.clients)]
        for thread in clients:
            thread.start()
        for thread in clients:
            thread.join()
        if client_errors:
            raise client_errors[0]
        elapsed = time.monotonic() - started
        if injector is not None:
            injector.stop.set()
            faults.join(timeout=120)
        gids = [s.gid for s in tally.submitted]
        # Stragglers of the last fault (a job re-delivered after its lease lapsed) get the drain too.
        drain_until = time.monotonic() + args.drain_s
        for project in projects:
            left = [s.gid for s in tally.submitted if s.project == project and s.gid not in final]
            final.update(poll_all(urls, tokens[project], left, drain_until))
        check = check_store(weed, gids, plan.queue)
    lost = [g for g in gids if g not in final]
    dup_keys = sum(1 for ids in tally.idem_ids.values() if len(ids) != 1)
    latencies = [seconds(r) for r in final.values() if r["status"] == "succeeded"]
    report: dict[str, Any] = {
        "faults": bool(args.faults),
        "jobs_requested": args.jobs,
        "jobs_accepted": len(gids),
        "distinct_ids": len(set(gids)),
        "workers": args.workers,
        "apis": args.apis,
        "elapsed_s": round(elapsed, 1),
        "status_counts": dict(Counter(r["status"] for r in final.values())),
        "error_counts": dict(Counter(r["error"]["code"] for r in final.values() if r.get("error"))),
        "cancels_requested": sum(s.cancel for s in tally.submitted),
        "idempotency_keys": len(tally.idem_ids),
        "jobs_lost": len(lost),  # accepted, then missing or never terminal within the drain
        "lost_ids": lost[:20],
        "jobs_left_running": check.running,
        "duplicated_terminal_records": check.duplicated + dup_keys,
        "unaccounted_202": len(gids) - len(set(gids)) + dup_keys,
        "succeeded_missing_artifacts": check.missing,
        "swept_objects": check.swept,
        "orphaned_objects": len(check.orphaned),
        "orphaned_sample": check.orphaned[:10],
        "http_5xx": tally.http_5xx,
        "create_resends": tally.resends,
        "rejected": dict(tally.rejected),
        "e2e_p50_s": round(pct(latencies, 0.50), 2),
        "e2e_p99_s": round(pct(latencies, 0.99), 2),
        "e2e_mean_s": round(statistics.fmean(latencies), 2) if latencies else None,
        "throughput_jobs_per_s": round(len(final) / elapsed, 2) if elapsed else None,
        "logs": str(logs),
    }
    if len(projects) > 1:
        report |= project_report(final, tally)
    if injector is not None:
        report["fault_schedule"] = injector.schedule
        report["fault_counts"] = dict(Counter(f["fault"] for f in injector.schedule))
        report["fault_injection_errors"] = injector.errors
        report["worker_restarts"] = fleet.restarts
    return report


def project_report(final: dict[str, dict[str, Any]], tally: Tally) -> dict[str, Any]:
    """Each project's waits and the projects that starved (``scripts/soak_faults.py``)."""
    from scripts.soak_faults import project_waits, starved

    waits = project_waits(final, {s.gid: s.project for s in tally.submitted})
    return {"projects": waits, "starved_projects": starved(waits)}


def failures(report: dict[str, Any]) -> list[str]:
    """The figures that must be 0 (5xx too, without faults: nothing should fail then)."""
    names = ["jobs_lost", "jobs_left_running", "duplicated_terminal_records", "unaccounted_202"]
    names += ["succeeded_missing_artifacts", "orphaned_objects"]
    if "starved_projects" in report:
        names.append("starved_projects")
    if not report["faults"]:
        names.append("http_5xx")
    else:
        names.append("fault_injection_errors")
    return [name for name in names if report[name]]


def _exit_on_sigterm(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--apis", type=int, default=2)
    parser.add_argument("--clients", type=int, default=6, help="concurrent clients (jobs in flight)")
    parser.add_argument("--time-limit-s", type=float, default=900.0, help="stop submitting after this")
    parser.add_argument("--drain-s", type=float, default=300.0, help="keep polling this long after that")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--projects", type=int, default=1, help="projects, one queueing 10x each other's")
    parser.add_argument("--faults", action="store_true", help="Sentinel + restartable S3 + injected faults")
    parser.add_argument("--fault-interval-s", type=float, default=15.0, help="one fault this often (--faults)")
    parser.add_argument("--models-dir", default=None, help="prebuilt tiny models (else built in a temp dir)")
    parser.add_argument("--out", default=None, help="write the JSON report here too")
    args = parser.parse_args()
    # A SIGTERM (a test's time limit, a CI cancel) unwinds run()'s ExitStack like Ctrl-C does, so every
    # server and fleet process it started is stopped by PID instead of outliving this script.
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    report = run(args)
    text = json.dumps(report, indent=2)
    print(text)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text + "\n", encoding="utf-8")
    bad = failures(report)
    if bad:
        print(f"soak failed: {', '.join(bad)}", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
