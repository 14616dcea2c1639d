"""Live event streams under load: N concurrent ``GET /v1/generations/{id}/events`` on one API process.

A real ``genworker api`` process on a real ``redis-server`` (the distributed mode's queue), N queued
generations created through the API, one SSE stream per generation opened at once (httpx, asyncio,
one connection each). This script then plays the worker on the same Redis queue (``RedisQueue``:
claim, a stage/progress write per stage and a few denoising steps, finish), from a thread, so every
stream sees real status and progress events while the API's memory and CPU are sampled (psutil).

Phases: ``idle`` (all streams open, every job queued: heartbeats and reads only), ``live`` (the jobs
run: events flow), then every stream must have ended with its terminal event and every stage.

Run: ``python scripts/bench_sse.py [--streams 1000] [--quick]`` (prints JSON; ``--quick``: 50 streams).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from scripts.bench_api import BODY, _free_port, _stop, _wait_http  # noqa: E402

STAGES = ["loading", "denoising", "decoding", "encoding", "uploading"]
DENOISE_STEPS = 4
IDLE_HOLD_S = 10.0
OPEN_WAVE = 50  # streams being opened at once (a client opening 1,000 in one instant meets 503s)


def _api(tmp: Path, redis_url: str, streams: int) -> tuple[subprocess.Popen[bytes], int, str]:
    from api.api_keys import Scope
    from api.server import open_key_store
    from foundation.settings import Settings, settings_env

    port = _free_port()
    settings = {
        "data_dir": str(tmp),
        "queue": {"backend": "redis", "redis_url": redis_url},
        # An API on Redis needs the deployment's webhook key.
        "webhooks": {"secret_key": base64.urlsafe_b64encode(os.urandom(32)).decode("ascii")},
        "store": {
            "backend": "local",
            "local_root": str(tmp / "artifacts"),
            "public_base_url": f"http://127.0.0.1:{port}",
        },
        "api": {
            "rate_limit_per_s": 1e9,
            "rate_limit_burst": 1e9,
            "unhosted_models": "accept",  # no worker process: this script is the worker
            "events_max_streams_per_key": streams,
        },
        "log_level": "WARNING",
    }
    keys = open_key_store(Settings(data_dir=str(tmp), queue={"backend": "redis", "redis_url": redis_url}))
    _record, token = keys.create("bench", [Scope.generations_read, Scope.generations_write])
    keys.close()
    env = {**os.environ, "PYTHONPATH": str(ROOT), **settings_env(settings)}
    cmd = [sys.executable, "-m", "genworker.cli", "api", "--host", "127.0.0.1", "--port", str(port)]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stderr=subprocess.DEVNULL)
    _wait_http(f"http://127.0.0.1:{port}/v1/models", proc)
    return proc, port, token


class _Sampler(threading.Thread):
    """The API process's RSS (peak) and CPU seconds, sampled every 0.2 s."""

    def __init__(self, pid: int) -> None:
        import psutil

        super().__init__(daemon=True)
        self.proc = psutil.Process(pid)
        self.peak_rss = 0
        self.stop = threading.Event()

    def cpu_s(self) -> float:
        t = self.proc.cpu_times()
        return float(t.user + t.system)

    def run(self) -> None:
        while not self.stop.wait(0.2):
            self.peak_rss = max(self.peak_rss, self.proc.memory_info().rss)


def _play_worker(redis_url: str, n: int) -> None:
    """Claim every job and write what a worker writes, on the real queue."""
    from foundation.core.contract import Stage, Status
    from foundation.queue.base import Outcome
    from foundation.queue.redis.backend import RedisQueue

    queue = RedisQueue(redis_url)
    try:
        for _ in range(n):
            claim = queue.claim("bench-worker", ["tiny-wan"], block_s=5)
            assert claim is not None, "a created job was not claimable"
            for stage in STAGES:
                queue.progress(claim, Stage(stage), 0.0)
                if stage == "denoising":
                    for step in range(1, DENOISE_STEPS + 1):
                        queue.progress(claim, Stage.denoising, step / DENOISE_STEPS)
            queue.finish(claim, Outcome(status=Status.succeeded))
    finally:
        queue.close()


async def _follow(
    client: Any, gen_id: str, opened: asyncio.Event, counter: list[int], gate: asyncio.Semaphore
) -> dict[str, Any]:
    from genworker_client.events import SseParser

    parser, statuses, stages = SseParser(), [], []
    await gate.acquire()  # released once the stream answered: opens in waves, the streams all stay
    async with client.stream("GET", f"/v1/generations/{gen_id}/events") as response:
        gate.release()
        if response.status_code != 200:
            counter[0] += 1
            if counter[0] == counter[1]:
                opened.set()
            return {"statuses": [], "stages": [], "heartbeats": 0, "refused": response.status_code}
        counter[0] += 1
        if counter[0] == counter[1]:
            opened.set()
        async for line in response.aiter_lines():
            event = parser.feed(line)
            if event is None:
                continue
            if event.kind == "status":
                statuses.append(event.status)
            elif event.stage not in stages:
                stages.append(event.stage)
            if event.terminal:
                break
    return {"statuses": statuses, "stages": stages, "heartbeats": parser.comments}


async def _run_streams(port: int, token: str, ids: list[str], sampler: _Sampler, redis_url: str) -> dict[str, Any]:
    import httpx

    limits = httpx.Limits(max_connections=len(ids) + 10, max_keepalive_connections=0)
    headers = {"Authorization": f"Bearer {token}"}
    timeout = httpx.Timeout(30.0, read=120.0, pool=120.0)
    async with httpx.AsyncClient(
        base_url=f"http://127.0.0.1:{port}", headers=headers, limits=limits, timeout=timeout
    ) as client:
        opened, counter = asyncio.Event(), [0, len(ids)]
        started = time.monotonic()
        gate = asyncio.Semaphore(OPEN_WAVE)
        tasks = [asyncio.create_task(_follow(client, gen_id, opened, counter, gate)) for gen_id in ids]
        await asyncio.wait_for(opened.wait(), 120)
        open_s = time.monotonic() - started
        cpu0, t0 = sampler.cpu_s(), time.monotonic()
        await asyncio.sleep(IDLE_HOLD_S)
        idle_cpu = (sampler.cpu_s() - cpu0) / (time.monotonic() - t0)
        idle_rss = sampler.proc.memory_info().rss
        cpu1, t1 = sampler.cpu_s(), time.monotonic()
        worker = threading.Thread(target=_play_worker, args=(redis_url, len(ids)), daemon=True)
        worker.start()
        results = await asyncio.wait_for(asyncio.gather(*tasks), 600)
        live_s = time.monotonic() - t1
        live_cpu = (sampler.cpu_s() - cpu1) / live_s
        worker.join(30)
    complete = sum(r["statuses"] == ["queued", "running", "succeeded"] and r["stages"] == STAGES for r in results)
    return {
        "streams": len(ids),
        "open_all_s": round(open_s, 2),
        "idle_hold_s": IDLE_HOLD_S,
        "idle_api_cpu_cores": round(idle_cpu, 3),
        "idle_api_rss_mb": round(idle_rss / 2**20, 1),
        "live_s": round(live_s, 2),
        "live_api_cpu_cores": round(live_cpu, 3),
        "events_per_stream": 3 + len(STAGES) + DENOISE_STEPS,
        "complete_streams": complete,
        "refused_opens": sorted({r["refused"] for r in results if "refused" in r}),
        "min_heartbeats": min(r["heartbeats"] for r in results),
    }


def run(quick: bool = False, streams: int | None = None) -> dict[str, Any]:
    import httpx

    from tests.fixtures.redis_server import start_redis

    n = streams or (50 if quick else 1000)
    if shutil.which("redis-server") is None:
        return {"error": "redis-server is needed (Debian: apt-get install redis-server)"}
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, 4 * n + 256)), hard))  # the API inherits it
    tmp = Path(tempfile.mkdtemp(prefix="bench-sse-"))
    redis = start_redis(tmp / "redis")
    api = None
    try:
        api, port, token = _api(tmp / "api", redis.url, n)
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", headers={"Authorization": f"Bearer {token}"}) as c:
            ids = [c.post("/v1/generations", json=BODY).raise_for_status().json()["id"] for _ in range(n)]
        sampler = _Sampler(api.pid)
        base_rss = sampler.proc.memory_info().rss
        sampler.start()
        result = asyncio.run(_run_streams(port, token, ids, sampler, redis.url))
        sampler.stop.set()
        result |= {
            "api_rss_before_mb": round(base_rss / 2**20, 1),
            "api_rss_peak_mb": round(sampler.peak_rss / 2**20, 1),
            "rss_per_stream_kb": round((sampler.peak_rss - base_rss) / n / 1024, 1),
            "cpu_count": os.cpu_count(),
        }
        return result
    finally:
        if api is not None:
            _stop(api)
        redis.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--streams", type=int, default=None)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    print(json.dumps(run(quick=args.quick, streams=args.streams), indent=2))


if __name__ == "__main__":
    main()
