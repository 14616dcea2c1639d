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

Bounded in time: submission stops at ``--time-limit-s``; polling stops ``--drain-s`` later.

    .venv/bin/python scripts/soak.py --jobs 1000 --out var/soak.json
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.fixtures.redis_server import RedisServer, start_redis  # noqa: E402
from tests.fixtures.seaweed import SeaweedServer, running_seaweed  # noqa: E402
from worker.settings import settings_env  # noqa: E402

TERMINAL = {"succeeded", "failed", "canceled"}
MODELS = ["tiny-wan", "tiny-ltx2"]


@dataclass
class Submitted:
    gid: str
    key: str | None
    model: str
    cancel: bool = False


@dataclass
class Tally:
    lock: threading.Lock = field(default_factory=threading.Lock)
    submitted: list[Submitted] = field(default_factory=list)
    rejected: Counter[str] = field(default_factory=Counter)
    idem_ids: dict[str, set[str]] = field(default_factory=dict)
    http_5xx: int = 0


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def base_env(redis: RedisServer, weed: SeaweedServer, models_dir: Path, data_dir: Path) -> dict[str, str]:
    settings = {
        "data_dir": str(data_dir),
        "queue": {"backend": "redis", "redis_url": redis.url},
        "store": {
            "backend": "s3",
            "s3_endpoint_url": weed.endpoint,
            "s3_bucket": weed.bucket,
            "s3_region": weed.region,
            "s3_access_key_id": weed.access_key,
            "s3_secret_access_key": weed.secret_key,
        },
        "models": {"tiny_models_dir": str(models_dir)},
        "worker": {"hosted_models": MODELS, "preload": MODELS, "heartbeat_s": 1},
        "encoder": {"preset": "ultrafast", "threads": 1},
        "api": {"rate_limit_per_s": 100000, "rate_limit_burst": 100000},
    }
    return {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT), **settings_env(settings)}


@contextmanager
def processes(env: dict[str, str], logs: Path, workers: int, apis: int) -> Iterator[list[str]]:
    """Start the worker and API processes; yield the API base URLs; stop them by PID."""
    procs: list[subprocess.Popen[bytes]] = []
    urls = []
    try:
        for i in range(workers):
            wenv = {**env, **settings_env({"worker": {"metrics_port": free_port()}})}
            out = (logs / f"worker-{i}.log").open("wb")
            procs.append(
                subprocess.Popen(
                    [sys.executable, "-m", "genworker.cli", "worker"], env=wenv, stdout=out, stderr=subprocess.STDOUT
                )
            )
        for i in range(apis):
            port = free_port()
            cmd = [sys.executable, "-m", "genworker.cli", "api", "--host", "127.0.0.1", "--port", str(port)]
            out = (logs / f"api-{i}.log").open("wb")
            procs.append(subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT))
            urls.append(f"http://127.0.0.1:{port}")
        yield urls
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def create_key(env: dict[str, str], redis_url: str) -> str:
    cmd = [sys.executable, "-m", "genworker.cli", "keys", "create", "--project", "soak", "--redis-url", redis_url]
    cmd += ["--scope", "generations:write", "--scope", "generations:read"]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120, check=True)
    return done.stdout.strip()


def wait_available(urls: list[str], timeout_s: float = 300) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            ok = 0
            for url in urls:
                data = httpx.get(f"{url}/v1/models", timeout=5).json()["data"]
                ok += all(any(m["id"] == mid and m["available"] for m in data) for mid in MODELS)
            if ok == len(urls):
                return
        except (httpx.HTTPError, KeyError, ValueError):
            pass
        time.sleep(1)
    raise RuntimeError(f"models not available within {timeout_s} s")


def random_body(rng: random.Random, catalog: Any) -> dict[str, Any]:
    model = rng.choice(MODELS)
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


def submit_one(i: int, urls: list[str], token: str, catalog: Any, tally: Tally, seed: int) -> str | None:
    """Create one job (maybe with replays of its Idempotency-Key, maybe canceled); its id."""
    rng = random.Random(seed * 1_000_003 + i)
    body = random_body(rng, catalog)
    headers = {"Authorization": f"Bearer {token}"}
    roll = rng.random()
    key = f"soak-{seed}-{i}" if roll < 0.15 else None
    cancel = 0.15 <= roll < 0.22
    sends = 1
    if key is not None:
        headers["Idempotency-Key"] = key
        sends = 2 if roll < 0.10 else 3  # sequential replays, or three at once
    with httpx.Client(timeout=30) as c:

        def post(n: int) -> httpx.Response:
            return c.post(f"{urls[(i + n) % len(urls)]}/v1/generations", json=body, headers=headers)

        if sends == 3:
            with ThreadPoolExecutor(3) as pool:
                responses = list(pool.map(post, range(3)))
        else:
            responses = [post(n) for n in range(sends)]
        for r in responses:
            if r.status_code >= 500:
                with tally.lock:
                    tally.http_5xx += 1
        ok = [r for r in responses if r.status_code in (200, 201, 202)]
        if not ok:
            with tally.lock:
                tally.rejected[f"{responses[0].status_code}:{responses[0].text[:80]}"] += 1
            return None
        gid = ok[0].json()["id"]
        if cancel:
            c.post(f"{urls[i % len(urls)]}/v1/generations/{gid}/cancel", headers=headers)
        with tally.lock:
            tally.submitted.append(Submitted(gid, key, body["model"], cancel))
            if key is not None:
                tally.idem_ids.setdefault(key, set()).update(r.json()["id"] for r in ok)
        return str(gid)


def poll_all(urls: list[str], token: str, gids: list[str], deadline: float) -> dict[str, dict[str, Any]]:
    final: dict[str, dict[str, Any]] = {}
    pending = list(gids)
    headers = {"Authorization": f"Bearer {token}"}
    with httpx.Client(timeout=30, headers=headers) as c:
        while pending and time.monotonic() < deadline:
            still = []
            for n, gid in enumerate(pending):
                r = c.get(f"{urls[n % len(urls)]}/v1/generations/{gid}")
                if r.status_code == 200 and r.json()["status"] in TERMINAL:
                    final[gid] = r.json()
                else:
                    still.append(gid)
            pending = still
            if pending:
                time.sleep(0.25)
    return final


def check_store(weed: SeaweedServer, records: dict[str, dict[str, Any]], redis_url: str) -> tuple[int, int]:
    """(succeeded jobs with a missing/short object, jobs with more than one terminal event)."""
    from worker.queue.config import QueueSettings
    from worker.queue.factory import open_queue

    s3 = weed.client()
    queue = open_queue(QueueSettings(backend="redis", redis_url=redis_url))
    missing = duplicated = 0
    try:
        for gid, view in records.items():
            terminals = [e for e in queue.events(gid) if e.status.value in TERMINAL]
            duplicated += int(len(terminals) != 1)
            record = queue.get(gid)
            if view["status"] != "succeeded":
                continue
            if record is None or not record.artifacts:
                missing += 1
                continue
            for art in record.artifacts:
                try:
                    head = s3.head_object(Bucket=weed.bucket, Key=art.key)
                    missing += int(head["ContentLength"] != art.bytes)
                except Exception:  # any refusal means the artifact is not there
                    missing += 1
    finally:
        queue.close()
    return missing, duplicated


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
    from worker.core.catalog import load_catalog

    catalog = load_catalog()
    work = Path(tempfile.mkdtemp(prefix="genworker-soak-"))
    logs = work / "logs"
    logs.mkdir()
    with ExitStack() as stack:
        redis = start_redis(work / "redis", "--appendonly", "yes")
        stack.callback(redis.stop)
        weed = stack.enter_context(running_seaweed(work / "seaweed"))
        models_dir = Path(args.models_dir) if args.models_dir else work / "models"
        if not args.models_dir:
            from pipelines.tiny import build_all

            build_all(models_dir)
        env = base_env(redis, weed, models_dir, work / "data")
        token = create_key(env, redis.url)
        urls = stack.enter_context(processes(env, logs, args.workers, args.apis))
        wait_available(urls)
        tally = Tally()
        started = time.monotonic()
        submit_deadline = started + args.time_limit_s
        final: dict[str, dict[str, Any]] = {}
        counter = iter(range(args.jobs))
        counter_lock = threading.Lock()

        def client_loop() -> None:
            while time.monotonic() < submit_deadline:
                with counter_lock:
                    i = next(counter, None)
                if i is None:
                    return
                sub = submit_one(i, urls, token, catalog, tally, args.seed)
                if sub is not None:
                    final.update(poll_all(urls, token, [sub], submit_deadline + args.drain_s))

        with ThreadPoolExecutor(args.clients) as pool:
            for f in [pool.submit(client_loop) for _ in range(args.clients)]:
                f.result()
        gids = [s.gid for s in tally.submitted]
        elapsed = time.monotonic() - started
        missing, duplicated_events = check_store(weed, final, redis.url)
    lost = [g for g in gids if g not in final]
    dup_keys = sum(1 for ids in tally.idem_ids.values() if len(ids) != 1)
    latencies = [seconds(r) for r in final.values() if r["status"] == "succeeded"]
    return {
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
        "duplicated_terminal_records": duplicated_events + dup_keys,
        "succeeded_missing_artifacts": missing,
        "http_5xx": tally.http_5xx,
        "rejected": dict(tally.rejected),
        "e2e_p50_s": round(pct(latencies, 0.50), 2),
        "e2e_p99_s": round(pct(latencies, 0.99), 2),
        "e2e_mean_s": round(statistics.fmean(latencies), 2) if latencies else None,
        "throughput_jobs_per_s": round(len(final) / elapsed, 2) if elapsed else None,
        "logs": str(logs),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--apis", type=int, default=2)
    parser.add_argument("--clients", type=int, default=6, help="concurrent clients (jobs in flight)")
    parser.add_argument("--time-limit-s", type=float, default=900.0, help="stop submitting after this")
    parser.add_argument("--drain-s", type=float, default=300.0, help="keep polling this long after that")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--models-dir", default=None, help="prebuilt tiny models (else built in a temp dir)")
    parser.add_argument("--out", default=None, help="write the JSON report here too")
    args = parser.parse_args()
    report = run(args)
    text = json.dumps(report, indent=2)
    print(text)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text + "\n", encoding="utf-8")
    bad = report["jobs_lost"] or report["duplicated_terminal_records"] or report["succeeded_missing_artifacts"]
    return 1 if bad or report["http_5xx"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
