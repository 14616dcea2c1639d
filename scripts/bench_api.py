"""API benchmark: requests/s and latency of ``GET /v1/generations/{id}``, ``POST /v1/generations`` (a
unique ``Idempotency-Key`` per request) and ``GET /v1/models`` (the public catalog, no key) per API
process, on both queue backends, next to two baselines measured in the same run: a bare ASGI app returning
a constant JSON, and FastAPI's empty async route.

Every server is a real ``uvicorn`` process (uvloop + httptools) on loopback, one process each (one core
at most): the API is ``genworker api`` over the embedded backends (SQLite queue, local store, SQLite
key store) and over Redis (queue, keys and the shared rate-limit counter on one ``redis-server``
started here; local store). The load comes from this script's own generator in another process
(``load`` below): asyncio on uvloop over raw keep-alive sockets, a few microseconds of Python per
request, so one core drives well past the servers measured here. On a 2-core machine the server gets
one core and the generator the other (Redis shares them too in the Redis runs).

Two kinds of run per target:
- **max**: closed loop, ``CONNECTIONS`` connections each sending its next request when the last answer
  arrived; requests/s and server CPU seconds per request (psutil). Rounds are interleaved over the
  targets so machine noise hits every side alike; figures are medians over rounds.
- **half**: open loop at half the measured max rate (each connection on a fixed schedule); latency is
  measured from the scheduled send time, so a stall shows as the queueing it causes (no coordinated
  omission). This is where p99 is judged: at saturation latency is only queueing (connections ÷ rps).
  Rounds are interleaved as above; figures are medians over rounds, each round's p99 beside them.

Run: ``python scripts/bench_api.py [--quick] [--only get,post_redis]`` (prints JSON), or as a section of
``make bench``.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import functools
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

CONNECTIONS = 16
BODY: dict[str, Any] = {
    "model": "tiny-wan",
    "mode": "text_to_video",
    "variant": "fast",
    "parameters": {"resolution": "144p", "duration_seconds": 1, "ratio": "16:9"},
    "input": {"prompt": "a red fox running through snow"},
}

_BARE_APP = """
import uvicorn
BODY = b'{"id":"gen_0","status":"queued"}'
HEADERS = [(b"content-type", b"application/json"), (b"content-length", str(len(BODY)).encode())]
async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    await send({"type": "http.response.start", "status": 200, "headers": HEADERS})
    await send({"type": "http.response.body", "body": BODY})
uvicorn.run(app, host="127.0.0.1", port=%d, log_level="warning", lifespan="off", access_log=False)
"""

# The framework alone: FastAPI answering a constant from an empty async route (the baseline)
# and from a sync one (a threadpool hop per request, as the API's routes had before).
_FASTAPI_APP = """
import uvicorn
from fastapi import FastAPI
app = FastAPI()
@app.get("/async")
async def constant_async() -> dict[str, str]:
    return {"id": "gen_0", "status": "queued"}
@app.get("/sync")
def constant_sync() -> dict[str, str]:
    return {"id": "gen_0", "status": "queued"}
uvicorn.run(app, host="127.0.0.1", port=%d, log_level="warning", lifespan="off", access_log=False)
"""


# ------------------------------------------------------------------------------------ load generator


class _Connection(asyncio.Protocol):
    """One keep-alive connection: sends a request, reads the answer (Content-Length framed), repeats."""

    def __init__(self, load: _Load, index: int) -> None:
        self.load = load
        self.index = index
        self.transport: Any = None  # uvloop's transport is no asyncio.Transport subclass
        self.buffer = b""
        self.sent_at = 0.0
        self.busy = False
        self.backlog = 0  # paced: sends that fell due while a request was in flight
        self.opened: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
        self.opened.set_result(None)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.load.running:
            self.load.errors += 1
            self.load.running = False

    def send(self, scheduled: float) -> None:
        assert self.transport is not None
        self.busy = True
        # Latency counts from when the request was due, or from now when a timer fired early (uvloop
        # rounds its timers to the millisecond): never negative, and a stall still counts in full.
        self.sent_at = min(scheduled, time.perf_counter())
        self.transport.write(self.load.next_request())

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while True:
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                return
            head = self.buffer[:end].lower()
            at = head.find(b"content-length:")
            length = 0
            if at >= 0:
                stop = head.find(b"\r\n", at)
                length = int(head[at + 15 : stop if stop >= 0 else len(head)])
            if len(self.buffer) < end + 4 + length:
                return
            status = int(self.buffer[9:12])
            self.buffer = self.buffer[end + 4 + length :]
            self.load.done(self, status)


class _Load:
    """Closed loop (``rate`` None) or paced at ``rate`` requests/s over every connection."""

    def __init__(self, host: str, port: int, request: bytes, post_body: bytes | None, rate: float | None) -> None:
        self.host, self.port = host, port
        self.request = request
        self.post_body = post_body
        self.prefix = uuid.uuid4().hex[:12].encode()
        self.counter = 0
        self.rate = rate
        self.running = False
        self.recording = False
        self.latencies: list[float] = []
        self.errors = 0
        self.statuses: dict[int, int] = {}
        self.loop = asyncio.get_running_loop()

    def next_request(self) -> bytes:
        if self.post_body is None:
            return self.request
        self.counter += 1
        return self.request + b"Idempotency-Key: " + self.prefix + b"-%d\r\n\r\n" % self.counter + self.post_body

    def done(self, conn: _Connection, status: int) -> None:
        now = time.perf_counter()
        conn.busy = False
        if self.recording:
            self.latencies.append(now - conn.sent_at)
            self.statuses[status] = self.statuses.get(status, 0) + 1
            if not 200 <= status < 300:
                self.errors += 1
        if not self.running:
            return
        if self.rate is None:
            conn.send(now)
        elif conn.backlog:
            conn.backlog -= 1
            conn.send(conn.sent_at + CONNECTIONS / self.rate)  # latency counts from when it was due

    def tick(self, conn: _Connection, due: float) -> None:
        """Paced: the connection's next request falls due now; send it, or queue it behind the answer."""
        if not self.running:
            return
        assert self.rate is not None
        if conn.busy:
            conn.backlog += 1
        else:
            conn.send(due)
        nxt = due + CONNECTIONS / self.rate
        self.loop.call_later(max(0.0, nxt - time.perf_counter()), self.tick, conn, nxt)

    async def run(self, warmup_s: float, seconds: float) -> dict[str, Any]:
        conns = []
        for i in range(CONNECTIONS):
            _, conn = await self.loop.create_connection(functools.partial(_Connection, self, i), self.host, self.port)
            await conn.opened
            conns.append(conn)
        self.running = True
        start = time.perf_counter()  # uvloop's loop.time() ticks in whole milliseconds
        for i, conn in enumerate(conns):
            if self.rate is None:
                conn.send(start)
            else:
                first = start + i / self.rate
                self.loop.call_later(i / self.rate, self.tick, conn, first)
        await asyncio.sleep(warmup_s)
        self.recording = True
        began = time.perf_counter()
        await asyncio.sleep(seconds)
        self.recording = False
        elapsed = time.perf_counter() - began
        self.running = False
        for conn in conns:
            assert conn.transport is not None
            conn.transport.close()
        ordered = sorted(self.latencies)
        n = len(ordered)

        def pct(q: float) -> float:
            return ordered[min(n - 1, int(q * n))] * 1000 if n else float("nan")

        return {
            "requests": n,
            "duration_s": elapsed,
            "rps": n / elapsed,
            "errors": self.errors,
            "statuses": self.statuses,
            "p50_ms": pct(0.50),
            "p90_ms": pct(0.90),
            "p99_ms": pct(0.99),
            "p999_ms": pct(0.999),
            "max_ms": ordered[-1] * 1000 if n else float("nan"),
            "percentiles_ms": [pct(i / 200) for i in range(1, 200)],
        }


def _request_bytes(spec: dict[str, Any]) -> tuple[bytes, bytes | None]:
    lines = [f"{spec['method']} {spec['path']} HTTP/1.1", f"Host: {spec['host']}:{spec['port']}"]
    if spec.get("token"):
        lines.append(f"Authorization: Bearer {spec['token']}")
    body = spec.get("body")
    if body is None:
        return ("\r\n".join(lines) + "\r\n\r\n").encode(), None
    raw = body.encode()
    lines += ["Content-Type: application/json", f"Content-Length: {len(raw)}"]
    return ("\r\n".join(lines) + "\r\n").encode(), raw  # Idempotency-Key and the blank line per request


def load_main(spec: dict[str, Any]) -> dict[str, Any]:
    """The generator process: one run against one URL, as described by ``spec``."""
    import uvloop

    request, body = _request_bytes(spec)

    async def main() -> dict[str, Any]:
        load = _Load(spec["host"], spec["port"], request, body, spec.get("rate"))
        return await load.run(spec["warmup_s"], spec["seconds"])

    return uvloop.run(main())


# ------------------------------------------------------------------------------------ servers


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_http(url: str, proc: subprocess.Popen[bytes], timeout_s: float = 60.0) -> None:
    import httpx

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
        try:
            httpx.get(url, timeout=1.0)
            return
        except httpx.TransportError:
            time.sleep(0.1)
    raise RuntimeError(f"{url} did not answer within {timeout_s} s")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _api_env(
    data: Path, port: int, redis_url: str | None, extra: dict[str, dict[str, Any]] | None = None, root: Path = ROOT
) -> dict[str, str]:
    from foundation.settings import settings_env

    queue: dict[str, Any] = {"backend": "sqlite", "sqlite_path": str(data / "queue.db")}
    webhooks: dict[str, Any] = {}
    if redis_url:  # an API on Redis needs the deployment's webhook key
        queue = {"backend": "redis", "redis_url": redis_url}
        webhooks = {"secret_key": base64.urlsafe_b64encode(os.urandom(32)).decode("ascii")}
    settings: dict[str, Any] = {
        "data_dir": str(data),
        "queue": queue,
        "store": {
            "backend": "local",
            "local_root": str(data / "artifacts"),
            "public_base_url": f"http://127.0.0.1:{port}",
        },
        # The per-key limiter would answer 429 long before the server saturates: lifted for the benchmark
        # (it still runs on every request: the in-process bucket, or the Redis counter).
        "api": {"rate_limit_per_s": 1000000000, "rate_limit_burst": 1000000000},
        "webhooks": webhooks,
        "log_level": "WARNING",
    }
    for section, values in (extra or {}).items():  # an arm's settings (scripts/bench_optional.py)
        settings[section] = {**settings[section], **values}
    return {**os.environ, "PYTHONPATH": str(root), **settings_env(settings)}


class _Api:
    """One ``genworker api`` process, a key for it and one generation to poll. ``extra``: settings by
    section on top of the benchmark's; ``tree``: another checkout whose code the server runs."""

    def __init__(
        self,
        tmp: Path,
        name: str,
        redis_url: str | None,
        extra: dict[str, dict[str, Any]] | None = None,
        tree: Path | None = None,
    ) -> None:
        from foundation.settings import Settings

        self.data = tmp / name
        self.data.mkdir()
        self.port = _free_port()
        env = _api_env(self.data, self.port, redis_url, extra, tree or ROOT)
        settings = Settings(
            data_dir=str(self.data),
            queue={"backend": "redis", "redis_url": redis_url} if redis_url else {"backend": "sqlite"},
        )
        from api.api_keys import Scope
        from api.server import open_key_store

        keys = open_key_store(settings)
        _record, self.token = keys.create("bench", [Scope.generations_read, Scope.generations_write])
        keys.close()
        cmd = [sys.executable, "-m", "genworker.cli", "api", "--host", "127.0.0.1", "--port", str(self.port)]
        self.proc = subprocess.Popen(cmd, cwd=tree or ROOT, env=env, stderr=subprocess.DEVNULL)
        self.gen_id = ""

    def ready(self) -> None:
        import httpx

        _wait_http(f"http://127.0.0.1:{self.port}/v1/models", self.proc)
        created = httpx.post(
            f"http://127.0.0.1:{self.port}/v1/generations",
            json=BODY,
            headers={"Authorization": f"Bearer {self.token}", "Idempotency-Key": "seed"},
        )
        created.raise_for_status()
        self.gen_id = created.json()["id"]


def _target(proc: subprocess.Popen[bytes], port: int, method: str, path: str, token: str = "") -> dict[str, Any]:
    spec: dict[str, Any] = {"host": "127.0.0.1", "port": port, "method": method, "path": path, "token": token}
    if method == "POST":
        spec["body"] = json.dumps(BODY)
    return {"proc": proc, "spec": spec}


def _measure(target: dict[str, Any], seconds: float, rate: float | None, extra_pids: list[int]) -> dict[str, Any]:
    """One generator run; the server's CPU (and Redis', when it takes part) over the same span."""
    import psutil

    pids = [target["proc"].pid, *extra_pids]
    procs = [psutil.Process(p) for p in pids]
    before = [p.cpu_times() for p in procs]
    spec = {**target["spec"], "seconds": seconds, "warmup_s": 0.5, "rate": rate}
    out = subprocess.run(
        [sys.executable, __file__, "load", json.dumps(spec)], check=True, capture_output=True, text=True
    ).stdout
    data: dict[str, Any] = json.loads(out)
    after = [p.cpu_times() for p in procs]
    busy = [
        (a.user + a.system - b.user - b.system) / (data["duration_s"] + 0.5) for a, b in zip(after, before, strict=True)
    ]
    data["server_cpu_busy"] = busy[0]
    if len(busy) > 1:
        data["redis_cpu_busy"] = busy[1]
    data["rps_per_cpu_s"] = data["rps"] / busy[0] if busy[0] > 0 else None
    return data


def _med(runs: list[dict[str, Any]], key: str) -> float:
    return float(statistics.median(r[key] for r in runs if r.get(key) is not None))


def _summary(samples: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {
        "rps": round(_med(samples, "rps"), 1),
        "p50_ms": round(_med(samples, "p50_ms"), 3),
        "p99_ms": round(_med(samples, "p99_ms"), 3),
        "server_cpu_busy": round(_med(samples, "server_cpu_busy"), 2),
        "rps_per_core": round(_med(samples, "rps_per_cpu_s"), 1),
        "errors": sum(s["errors"] for s in samples),
        "rounds_rps": [round(s["rps"], 1) for s in samples],
    }
    if any("redis_cpu_busy" in s for s in samples):
        out["redis_cpu_busy"] = round(_med(samples, "redis_cpu_busy"), 2)
    return out


def run(quick: bool = False, only: list[str] | None = None) -> dict[str, Any]:
    from tests.fixtures.redis_server import start_redis

    if shutil.which("redis-server") is None:
        return {"error": "redis-server is needed for the Redis runs (Debian: apt-get install redis-server)"}
    seconds, rounds, half_s = (3.0, 1, 3.0) if quick else (8.0, 3, 8.0)
    load_before = os.getloadavg()
    tmp = Path(tempfile.mkdtemp(prefix="bench-api-"))
    redis = start_redis(tmp / "redis-server")
    procs: list[subprocess.Popen[bytes]] = []
    try:
        bare_port, fastapi_port = _free_port(), _free_port()
        bare = subprocess.Popen([sys.executable, "-c", _BARE_APP % bare_port], stderr=subprocess.DEVNULL)
        procs.append(bare)
        fastapi = subprocess.Popen([sys.executable, "-c", _FASTAPI_APP % fastapi_port], stderr=subprocess.DEVNULL)
        procs.append(fastapi)
        sqlite_api = _Api(tmp, "sqlite", None)
        procs.append(sqlite_api.proc)
        redis_api = _Api(tmp, "redis", redis.url)
        procs.append(redis_api.proc)
        _wait_http(f"http://127.0.0.1:{bare_port}/", bare)
        _wait_http(f"http://127.0.0.1:{fastapi_port}/async", fastapi)
        sqlite_api.ready()
        redis_api.ready()
        targets: dict[str, dict[str, Any]] = {
            "bare": _target(bare, bare_port, "GET", "/"),
            "fastapi_async": _target(fastapi, fastapi_port, "GET", "/async"),
            "fastapi_constant": _target(fastapi, fastapi_port, "GET", "/sync"),
        }
        for name, api in (("", sqlite_api), ("_redis", redis_api)):
            path = f"/v1/generations/{api.gen_id}"
            targets[f"get{name}"] = _target(api.proc, api.port, "GET", path, api.token)
            targets[f"post{name}"] = _target(api.proc, api.port, "POST", "/v1/generations", api.token)
            # The public catalog, no key: at least the poll's rate (issue 40), measured beside it.
            targets[f"models{name}"] = _target(api.proc, api.port, "GET", "/v1/models")
            for kind in ("get", "post", "models"):
                targets[f"{kind}{name}"]["redis"] = bool(name)
        if only:
            targets = {k: v for k, v in targets.items() if k in only or k in ("bare", "fastapi_async")}
        extra = {name: [redis.pid] if t.get("redis") else [] for name, t in targets.items()}
        for name, target in targets.items():  # warm-up: imports, caches, SQLite pages, connections
            _measure(target, 1.0, None, extra[name])
        runs: dict[str, list[dict[str, Any]]] = {name: [] for name in targets}
        for _ in range(rounds):  # interleaved, so machine noise hits every side alike
            for name, target in targets.items():
                runs[name].append(_measure(target, seconds, None, extra[name]))
        half: dict[str, list[dict[str, Any]]] = {n: [] for n in targets if n.startswith(("get", "post", "models"))}
        for _ in range(rounds):  # interleaved too: one stall of a shared machine sits in one round
            for name, done in half.items():
                rate = _med(runs[name], "rps") / 2
                done.append(_measure(targets[name], half_s, rate, extra[name]))
    finally:
        for proc in procs:
            _stop(proc)
        redis.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    result = _report(runs, half, seconds, rounds, half_s)
    # The machine's load (1-minute average) as the run began and ended: the figures are per process on
    # shared cores, so a busy machine lowers them all (ratios within the run hold better).
    result["load_average_1m"] = [round(load_before[0], 2), round(os.getloadavg()[0], 2)]
    return result


def _half_summary(samples: list[dict[str, Any]]) -> tuple[dict[str, Any], list[float]]:
    """Medians over the half-rate rounds (each round's p99 and the largest latency beside them), and the
    percentile curve of the round whose p99 is the median."""
    out = {
        "offered_rps": round(_med(samples, "rps"), 1),
        "p50_ms": round(_med(samples, "p50_ms"), 3),
        "p99_ms": round(_med(samples, "p99_ms"), 3),
        "p999_ms": round(_med(samples, "p999_ms"), 3),
        "max_ms": round(max(s["max_ms"] for s in samples), 3),
        "rounds_p99_ms": [round(s["p99_ms"], 3) for s in samples],
        "errors": sum(s["errors"] for s in samples),
    }
    middle = sorted(samples, key=lambda s: s["p99_ms"])[len(samples) // 2]
    return out, [round(x, 3) for x in middle["percentiles_ms"]]


def _report(
    runs: dict[str, list[dict[str, Any]]],
    half: dict[str, list[dict[str, Any]]],
    seconds: float,
    rounds: int,
    half_s: float,
) -> dict[str, Any]:
    result: dict[str, Any] = {
        "load_generator": (
            f"scripts/bench_api.py load: asyncio on uvloop, raw keep-alive sockets, {CONNECTIONS} connections, "
            f"closed loop {seconds:g} s x {rounds} rounds per target (interleaved); then open loop at half "
            f"the measured max rate, {half_s:g} s x {rounds} rounds (interleaved)"
        ),
        "servers": (
            "uvicorn (uvloop + httptools), one process each; API: genworker api over SQLite (queue, keys) or "
            "Redis (queue, keys, rate-limit counter), local store"
        ),
        "cores": os.cpu_count(),
    }
    bare = _med(runs["bare"], "rps")
    empty = _med(runs["fastapi_async"], "rps")
    for name, samples in runs.items():
        result[name] = _summary(samples)
        if name != "bare":
            result[name]["ratio_vs_bare"] = round(result[name]["rps"] / bare, 3)
        if name not in ("bare", "fastapi_async"):
            result[name]["ratio_vs_fastapi_async"] = round(result[name]["rps"] / empty, 3)
        if name in half:
            result[name]["half_rate"], result[f"{name}_half_rate_samples_ms"] = _half_summary(half[name])
    result["notes"] = (
        "rps: closed-loop maximum (median of rounds); rps_per_core = requests per server CPU-second. "
        "half_rate: the same request at half that rate, open loop, latency from the scheduled send time; "
        "medians over rounds (rounds_p99_ms: each round's p99; max_ms: the largest of any round). "
        "POST is a create with a unique Idempotency-Key (SQLite: one durable insert, synchronous=FULL; "
        "Redis: idempotency SET NX, index writes, commit.lua), GET a record read, a queue position and "
        "the view; models is the public catalog (GET /v1/models, no key, no If-None-Match: the whole body). "
        "fastapi_async (an empty async FastAPI route) is the framework alone; fastapi_constant the same from "
        "a sync route (one threadpool hop)."
    )
    return result


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "load":
        print(json.dumps(load_main(json.loads(sys.argv[2]))))
        sys.exit(0)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--only", default="", help="comma-separated targets (the baselines always run)")
    args = parser.parse_args()
    print(json.dumps(run(quick=args.quick, only=[t for t in args.only.split(",") if t] or None), indent=2))
