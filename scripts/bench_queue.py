"""Queue benchmark: enqueue rate and claim→finish round trip (p50/p99) on a loopback redis-server
this script starts, next to ``redis-benchmark -t xadd`` measured in the same run, the Redis commands
one job costs (``INFO commandstats`` delta; the capacity plan needs it), and the SQLite backend.

``poll_by_depth``: what one ``GET /v1/generations/{id}`` of a queued job costs the queue (record read +
queue position) with 0, 10,000 and 100,000 jobs queued: Redis time per poll (``INFO commandstats``
usec of the calls the poll sends), Redis CPU per poll (``INFO cpu``) and the client's latency, each the
median over batches, for the last job in the queue (and, as ``spread``, for 200 jobs across it), in
batches alternating with the poll of another model's only queued job on the same server (depth 0).
``retention``: Redis memory per finished job held and after its TTL passed and a purge ran; the SQLite
file size over repeated bursts with a purge after each. ``redis_pickup_idle``: enqueue → claim into an
idle consumer, next to bare Streams, on an idle machine and with every core kept busy (``bench_load``).
``fairness``: the claim under fair share by project next to plain FIFO (``scripts/bench_fair.py``).

``run(quick)`` returns plain JSON-able dicts; ``python scripts/bench_queue.py [--quick]`` prints them.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from foundation.core.contract import GenerationRecord, Money, RecordInput, RecordParameters, Status  # noqa: E402
from foundation.queue.base import JobQueue, Outcome  # noqa: E402
from foundation.queue.redis.backend import RedisQueue  # noqa: E402
from foundation.queue.redis.entries import encode_payload  # noqa: E402
from foundation.queue.sqlite.backend import SqliteQueue  # noqa: E402
from foundation.queue.sqlite.clock import Clock  # noqa: E402
from scripts import bench_fair  # noqa: E402
from scripts.bench_load import busy_cores  # noqa: E402
from tests.integration.thread_bursts import THREADS_PER_BURST, burst, open_fds_under  # noqa: E402

MODEL = "bench-model"
ALONE_MODEL = "bench-model-alone"  # its one job: depth 0 beside a backlog of MODEL


def _record(model: str = MODEL) -> GenerationRecord:
    return GenerationRecord(
        id=f"gen_{uuid.uuid4().hex}",
        project="bench",
        model=model,
        mode="text_to_video",
        variant="standard",
        parameters=RecordParameters(resolution="480p", duration_seconds=5, ratio="16:9"),
        input=RecordInput(prompt="a lighthouse in a storm, waves crashing, cinematic"),
        price_hold=Money(amount="0.50"),
    )


def _percentiles_ms(samples_s: list[float]) -> dict[str, float]:
    ordered = sorted(samples_s)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return {"p50_ms": round(statistics.median(ordered) * 1000, 3), "p99_ms": round(p99 * 1000, 3)}


def _measure_queue(q: JobQueue, n: int) -> dict[str, Any]:
    started = time.perf_counter()
    for _ in range(n):
        q.enqueue(_record())
    enqueue_s = time.perf_counter() - started
    round_trips: list[float] = []
    done = Outcome(status=Status.succeeded)
    started = time.perf_counter()
    for _ in range(n):
        t0 = time.perf_counter()
        claim = q.claim("bench-worker", [MODEL])
        assert claim is not None
        assert q.finish(claim, done)
        round_trips.append(time.perf_counter() - t0)
    cycles_s = time.perf_counter() - started
    return {
        "jobs": n,
        "enqueue_per_s": round(n / enqueue_s, 1),
        "claim_finish": _percentiles_ms(round_trips),
        # One consumer, the backlog enqueued beforehand: no-op claim → finish cycles per second.
        "claim_finish_cycles_per_s": round(n / cycles_s, 1),
    }


def _start_redis(directory: Path) -> tuple[subprocess.Popen[bytes], int]:
    for _ in range(5):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        args = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--dir", str(directory)]
        args += ["--save", "", "--appendonly", "no", "--logfile", str(directory / "redis.log")]
        proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        probe = redis.Redis(port=port)
        for _ in range(500):
            if proc.poll() is not None:
                break
            try:
                probe.ping()
                return proc, port
            except redis.ConnectionError:
                time.sleep(0.01)
        proc.terminate()
        proc.wait()
    raise RuntimeError("redis-server did not start")


def _redis_benchmark_xadd(port: int, n: int, clients: int) -> dict[str, Any]:
    # redis-benchmark 7.0 has no built-in ``-t xadd`` test (it prints only the CSV header): the XADD
    # is given explicitly, with a payload the size of a real job entry (no quotes: they break its CSV).
    payload = "x" * len(encode_payload(f"gen_{uuid.uuid4().hex}", MODEL))
    command = ["XADD", "benchstream", "*", "payload", payload]
    out = subprocess.run(
        ["redis-benchmark", "-h", "127.0.0.1", "-p", str(port), "-n", str(n), "-c", str(clients), "--csv", *command],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    rows = list(csv.DictReader(io.StringIO(out)))
    row = rows[0]
    return {
        "clients": clients,
        "requests": n,
        "rps": float(row["rps"]),
        "p50_ms": float(row.get("p50_latency_ms", "nan")),
        "p99_ms": float(row.get("p99_latency_ms", "nan")),
    }


class _Sends:
    count = 0


class _CountingConnection(redis.Connection):
    """A real connection that counts its writes: one per round trip (a command, a pipeline, a raw round
    trip), not those of its set-up (``HELLO``, ``CLIENT SETINFO``, ...) when it connects."""

    def __init__(self, *, sends: _Sends, **kwargs: Any) -> None:
        super().__init__(**kwargs)  # type: ignore[no-untyped-call]
        self._sends = sends
        self._connecting = False

    def on_connect_check_health(self, *args: Any, **kwargs: Any) -> None:
        self._connecting = True
        try:
            super().on_connect_check_health(*args, **kwargs)
        finally:
            self._connecting = False

    def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        if not self._connecting:
            self._sends.count += 1
        super().send_packed_command(command, check_health)  # type: ignore[no-untyped-call]


class CountingRedis(redis.Redis):
    """A real client that counts its round trips (``sent``): the writes of its connections, so a command,
    a pipeline and a ``RoundTrips.send`` each count once; a connection's set-up does not count."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._sends = _Sends()
        pool = self.connection_pool  # no connection made yet: every one will count
        pool.connection_class = _CountingConnection
        pool.connection_kwargs["sends"] = self._sends

    @property
    def sent(self) -> int:
        return self._sends.count

    @sent.setter
    def sent(self, value: int) -> None:
        self._sends.count = value


def _command_delta(before: dict[str, Any], after: dict[str, Any], n: int) -> dict[str, float]:
    """Calls per job of each command between two ``INFO commandstats`` readings (the INFO call left out)."""
    per_command = {}
    for name, stats in after.items():
        delta = stats["calls"] - before.get(name, {}).get("calls", 0)
        if delta:
            per_command[name.removeprefix("cmdstat_")] = round(delta / n, 2)
    per_command.pop("info", None)
    return dict(sorted(per_command.items(), key=lambda kv: -kv[1]))


def _commands_per_job(port: int, n: int) -> dict[str, Any]:
    """Client round trips and Redis commands per job: the whole job (enqueue + claim + finish, one worker,
    no waiting) and the worker's side alone (claim + finish of jobs enqueued by another client)."""
    client = CountingRedis(port=port, decode_responses=True)
    q = RedisQueue(client, lease_ttl_s=30)
    q.enqueue(_record())  # warm-up: script loading and group creation are not per job
    warm = q.claim("bench-worker", [MODEL])
    assert warm is not None and q.finish(warm, Outcome(status=Status.succeeded))
    before = client.info("commandstats")
    client.sent = 0
    done = Outcome(status=Status.succeeded)
    for _ in range(n):
        q.enqueue(_record())
        claim = q.claim("bench-worker", [MODEL])
        assert claim is not None and q.finish(claim, done)
    round_trips = client.sent
    per_command = _command_delta(before, client.info("commandstats"), n)
    # The worker's side: the backlog comes from another client, so only claim and finish are counted.
    producer = RedisQueue(redis.Redis(port=port, decode_responses=True), lease_ttl_s=30)
    for _ in range(n):
        producer.enqueue(_record())
    producer.close()
    before = client.info("commandstats")
    client.sent = 0
    for _ in range(n):
        claim = q.claim("bench-worker", [MODEL])
        assert claim is not None and q.finish(claim, done)
    worker_round_trips = client.sent
    worker_commands = _command_delta(before, client.info("commandstats"), n)
    client.close()
    return {
        "jobs": n,
        "client_round_trips_per_job": round(round_trips / n, 2),
        "server_commands_per_job": round(sum(per_command.values()), 2),
        "by_command": per_command,
        "worker_client_round_trips_per_job": round(worker_round_trips / n, 2),
        "worker_server_commands_per_job": round(sum(worker_commands.values()), 2),
        "worker_by_command": worker_commands,
        "note": "commandstats counts commands run inside Lua scripts too; evalsha is the script call itself",
    }


# The consumer of ``_pickup_idle``, in its own process (its own interpreter and GIL, as a worker has):
# claims with a blocking wait, finishes at once and prints the monotonic time the claim returned.
_CONSUMER = """
import sys, time
sys.path.insert(0, {root!r})
from scripts.bench_queue import MODEL
from foundation.core.contract import Status
from foundation.queue.base import Outcome
from foundation.queue.redis.backend import RedisQueue
q = RedisQueue({url!r}, lease_ttl_s=30)
done = Outcome(status=Status.succeeded)
print("ready", flush=True)
for _ in range({n}):
    claim = q.claim("bench-consumer", [MODEL], block_s=30)
    picked = time.perf_counter()
    assert claim is not None and q.finish(claim, done)
    print(repr(picked), flush=True)
"""


_PRODUCER = """
import sys
sys.path.insert(0, {root!r})
from scripts.bench_queue import _record
from foundation.queue.redis.backend import RedisQueue
q = RedisQueue({url!r}, lease_ttl_s=30)
for _ in range({n}):
    q.enqueue(_record())
"""


def _sustained(port: int, n: int) -> dict[str, Any]:
    """No-op jobs/s of one consumer (this process) while a producer process enqueues ``n`` jobs as fast
    as it can: the consumer shares the 2 cores with the producer and the server, as on a busy node."""
    url = f"redis://127.0.0.1:{port}/0"
    q = RedisQueue(url, lease_ttl_s=30)
    q.enqueue(_record())  # warm-up: scripts loaded, group made
    warm = q.claim("bench-consumer", [MODEL])
    done = Outcome(status=Status.succeeded)
    assert warm is not None and q.finish(warm, done)
    proc = subprocess.Popen([sys.executable, "-c", _PRODUCER.format(root=str(ROOT), url=url, n=n)], cwd=ROOT)
    try:
        first = last = 0.0
        for _ in range(n):
            claim = q.claim("bench-consumer", [MODEL], block_s=30)
            assert claim is not None and q.finish(claim, done)
            last = time.perf_counter()
            first = first or last
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        q.close()
    return {"jobs": n, "jobs_per_s": round((n - 1) / (last - first), 1)}


# The floor of ``_pickup_idle``: a bare consumer process blocked in ``XREADGROUP``, woken by an ``XADD``.
_RAW_CONSUMER = """
import time, redis
r = redis.Redis(port={port}, decode_responses=True)
r.xgroup_create("{stream}", "raw", id="0", mkstream=True)
print("ready", flush=True)
for _ in range({n}):
    reply = None
    while not reply:
        reply = r.xreadgroup("raw", "c", {{"{stream}": ">"}}, count=1, block=250)
    picked = time.perf_counter()
    r.xack("{stream}", "raw", reply[0][1][0][0])
    print(repr(picked), flush=True)
"""


@dataclass(frozen=True)
class Lane:
    """One consumer of an idle pick-up measurement: its process's program (prints ``ready``, then the
    ``perf_counter`` of each pick-up), how a job is built (before the clock starts) and how it is enqueued."""

    code: str
    make: Callable[[], Any]
    enqueue: Callable[[Any], Any]


class Consumers:
    """The consumer processes of ``lanes``, started together (each waits in its blocking read); ``sample(i)``
    is one pick-up of lane ``i`` in seconds. Each program reads its job count from its own code: the
    processes are waited for on exit, and killed if they have not ended."""

    def __init__(self, lanes: list[Lane]) -> None:
        self.lanes = lanes
        self._procs: list[subprocess.Popen[str]] = []

    def __enter__(self) -> Consumers:
        for lane in self.lanes:
            self._procs.append(
                subprocess.Popen([sys.executable, "-c", lane.code], stdout=subprocess.PIPE, text=True, cwd=ROOT)
            )
        for proc in self._procs:
            assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        return self

    def sample(self, i: int) -> float:
        """``enqueue(job)`` → lane ``i``'s consumer printing its pick-up time (the job built first)."""
        lane, proc = self.lanes[i], self._procs[i]
        assert proc.stdout is not None
        job = lane.make()
        time.sleep(0.01)  # every consumer is back in its blocking read
        t0 = time.perf_counter()
        lane.enqueue(job)
        return float(proc.stdout.readline()) - t0

    def __exit__(self, *exc: object) -> None:
        for proc in self._procs:
            try:
                proc.wait(timeout=0 if exc[0] else 30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def interleaved_pickups(lanes: list[Lane], n: int) -> list[list[float]]:
    """Per lane, ``n`` idle pick-ups (``Consumers.sample``), one job at a time, the lanes taking turns
    job by job, so each lane's samples are taken under the same load of the host as the others' (on
    this VM the cost of an idle wake-up drifts by 2-3x within minutes); the first 5 rounds left out as
    warm-up (each lane's program takes ``n + 5`` jobs). ``make()`` builds the job before the clock
    starts: building a request is the API's work, not the queue's."""
    samples: list[list[float]] = [[] for _ in lanes]
    with Consumers(lanes) as consumers:
        for i in range(n + 5):
            for lane, taken in enumerate(samples):
                picked = consumers.sample(lane)
                if i >= 5:
                    taken.append(picked)
    return samples


def _pickup_idle(port: int, n: int) -> dict[str, Any]:
    """Pick-up on an idle consumer: from the ``enqueue`` call to ``claim`` returning in a consumer process
    that waits in its blocking claim (each job enqueued only once the consumer is idle again), next to
    the same measurement of bare Streams, job by job in turn; both on an idle machine, then with every
    core kept busy by a lowest-priority load (``bench_load``: the cost of waking a halted core, measured
    apart). Both sides read ``time.perf_counter`` (CLOCK_MONOTONIC: one clock for every process)."""
    figures: dict[str, Any] = {"jobs": n, **_pickup_pair(port, n, "idle")}
    with busy_cores() as spinners:
        figures["busy_cores"] = {"spinners": spinners, **_pickup_pair(port, n, "busy")}
    return figures


def _pickup_pair(port: int, n: int, tag: str) -> dict[str, Any]:
    """The queue's idle pick-up and bare Streams' (the machine's wake-up cost), interleaved job by job,
    and their ratio (the figure the host's drift moves least)."""
    url = f"redis://127.0.0.1:{port}/0"
    producer = RedisQueue(url, lease_ttl_s=30)
    ours = Lane(_CONSUMER.format(root=str(ROOT), url=url, n=n + 5), _record, producer.enqueue)
    raw, raw_lane = raw_streams_lane(port, n + 5, tag)
    try:
        queue, floor = interleaved_pickups([ours, raw_lane], n)
    finally:
        producer.close()
        raw.close()
    return {
        "pickup": _percentiles_ms(queue),
        "raw_streams_pickup": _percentiles_ms(floor),
        "ratio_to_raw_p50": round(statistics.median(queue) / statistics.median(floor), 2),
    }


def raw_streams_lane(port: int, jobs: int, tag: str) -> tuple[redis.Redis, Lane]:
    """Bare Streams, ``jobs`` of them: an ``XADD`` of a payload the size of ours (built once, ahead)
    waking a bare consumer's ``XREADGROUP`` on its own stream ``raw-<tag>``; with the producer's client."""
    client = redis.Redis(port=port, decode_responses=True)
    payload = encode_payload(f"gen_{uuid.uuid4().hex}", MODEL)
    code = _RAW_CONSUMER.format(port=port, n=jobs, stream=f"raw-{tag}")
    return client, Lane(code, lambda: {"payload": payload}, lambda job: client.xadd(f"raw-{tag}", job))


def raw_streams_pickups(port: int, n: int, tag: str) -> list[float]:
    """Bare Streams' pick-ups (s), alone (``raw_streams_lane``)."""
    client, lane = raw_streams_lane(port, n + 5, tag)
    try:
        return interleaved_pickups([lane], n)[0]
    finally:
        client.close()


_POLL_COMMANDS = ("evalsha", "hget", "get")  # what RedisReads.get + position send (the model is cached)


def _poll_batch(client: redis.Redis, q: JobQueue, ids: list[str]) -> tuple[float, float, float, float]:
    """One batch of polls: (Redis usec per poll, Redis CPU usec per poll, client median ms, client p99 ms)."""
    stats_before, cpu_before = client.info("commandstats"), client.info("cpu")
    latencies = []
    for job_id in ids:
        t0 = time.perf_counter()
        record = q.get(job_id)
        position = q.position(job_id)
        latencies.append(time.perf_counter() - t0)
        assert record is not None and position is not None
    stats_after, cpu_after = client.info("commandstats"), client.info("cpu")
    usec = sum(
        stats_after.get(f"cmdstat_{c}", {}).get("usec", 0) - stats_before.get(f"cmdstat_{c}", {}).get("usec", 0)
        for c in _POLL_COMMANDS
    )
    cpu_s = sum(cpu_after[k] - cpu_before[k] for k in ("used_cpu_sys", "used_cpu_user"))
    p99 = statistics.quantiles(latencies, n=100)[98]
    return usec / len(ids), cpu_s * 1e6 / len(ids), statistics.median(latencies) * 1000, p99 * 1000


def _fill(q: JobQueue, n: int) -> list[str]:
    return [q.enqueue(_record()).record.id for _ in range(n)]


def _poll_by_depth(port: int, depths: tuple[int, ...], batches: int) -> dict[str, Any]:
    """Poll the last queued job (the old walk's worst case: every entry ahead of it) at each depth, next to
    the only queued job of another model on the same server (``depth_0_alongside``), in alternating
    batches: the two differ by their queue's depth alone, under the same load of the host and the same
    state of Redis (its memory, its keyspace's rehashing after the fill), so the ratio is the depth's
    cost. Depth 0 is also measured on its own, on an empty server (``0``). ``spread``: 200 jobs spread
    over the backlog instead, each polled once per batch (more of Redis' memory touched per batch than
    one job's keys)."""
    client = redis.Redis(port=port, decode_responses=True)
    out: dict[str, Any] = {}

    def medians(q: JobQueue, *samples: list[str]) -> list[dict[str, float]]:
        for sample in samples:
            _poll_batch(client, q, sample[:20])  # warm-up: scripts loaded, models cached
        rows: list[list[tuple[float, float, float, float]]] = [[] for _ in samples]
        for _ in range(batches):
            for sample, taken in zip(samples, rows, strict=True):
                taken.append(_poll_batch(client, q, sample))
        return [
            {
                "redis_usec_per_poll": round(statistics.median(r[0] for r in taken), 2),
                "redis_cpu_usec_per_poll": round(statistics.median(r[1] for r in taken), 2),
                "client_p50_ms": round(statistics.median(r[2] for r in taken), 3),
                "client_p99_ms": round(statistics.median(r[3] for r in taken), 3),  # the batches' median p99
            }
            for taken in rows
        ]

    for depth in depths:
        client.flushall()
        q = RedisQueue(client, lease_ttl_s=30)
        alone = q.enqueue(_record(ALONE_MODEL)).record.id
        ids = _fill(q, depth)
        if not ids:
            (figures,) = medians(q, [alone] * 200)
            out[str(depth)] = {**figures, "position_of_last": q.position(alone)}
            continue
        deep, beside = medians(q, [ids[-1]] * 200, [alone] * 200)
        out[str(depth)] = {**deep, "position_of_last": q.position(ids[-1]), "depth_0_alongside": beside}
        if len(ids) >= 200:
            (out[str(depth)]["spread"],) = medians(q, [ids[round(i * (len(ids) - 1) / 199)] for i in range(200)])
    deepest = out[str(depths[-1])]
    for key in ("redis_usec_per_poll", "redis_cpu_usec_per_poll", "client_p50_ms", "client_p99_ms"):
        ratio = deepest[key] / deepest["depth_0_alongside"][key]
        out[f"ratio_{key.removesuffix('_per_poll')}_deepest_vs_0"] = round(ratio, 3)
    out["batches"] = f"{batches} x 200 polls per depth, alternating with depth 0's; medians of the batches"
    client.close()
    return out


def _redis_retention(port: int, n: int) -> dict[str, Any]:
    """used_memory before N jobs, with them finished and held, and after their TTL passed + a purge."""
    client = redis.Redis(port=port, decode_responses=True)
    client.flushall()
    ttl_s = 2.0
    q = RedisQueue(client, lease_ttl_s=30, record_ttl_s=ttl_s)
    done = Outcome(status=Status.succeeded)

    def burst(count: int) -> list[str]:
        ids = _fill(q, count)
        for _ in ids:
            claim = q.claim("bench-worker", [MODEL])
            assert claim is not None and q.finish(claim, done)
        return ids

    def settled() -> int:
        time.sleep(ttl_s + 1)
        while client.scan(match="gw:{m:*}:job:*", count=10_000)[1]:
            time.sleep(0.2)
        q.purge_expired()
        time.sleep(0.5)  # emptied hash tables shrink in the server's cron
        return int(client.info("memory")["used_memory"])

    burst(3)
    baseline = settled()
    started = time.perf_counter()
    burst(n)
    held = int(client.info("memory")["used_memory"])
    finished_s = time.perf_counter() - started
    after = settled()
    client.close()
    return {
        "jobs": n,
        "record_ttl_s": ttl_s,
        "held_bytes_per_job": round((held - baseline) / n, 1),
        "held_note": f"jobs finished over {finished_s:.1f} s, so the first may have expired before this reading",
        "after_ttl_and_purge_bytes_per_job": round((after - baseline) / n, 2),
        "baseline_used_memory": baseline,
        "after_used_memory": after,
    }


def _sqlite_retention(directory: Path, bursts: int, n: int) -> dict[str, Any]:
    """Bursts of ``n`` jobs (idempotency keys, claim, finish) on one SQLite file, each followed by polls
    from ``THREADS_PER_BURST`` new threads (as the embedded API's threadpool makes them) and a purge past
    the TTLs: the file's size and this process's descriptors on the database's files (``directory``, its
    own) after each."""
    now = [time.time()]
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "retention.db"
    q = SqliteQueue(path, durable=False, record_ttl_s=3600, clock=Clock(wall=lambda: now[0]))
    done = Outcome(status=Status.succeeded)
    sizes, fds = [], []
    for round_ in range(bursts):
        for i in range(n):
            last = q.enqueue(_record(), idempotency_key=f"{round_}-{i}", request_hash="h").record.id
            claim = q.claim("bench-worker", [MODEL])
            assert claim is not None and q.finish(claim, done)

        def poll(job_id: str = last) -> None:  # a GET of the job: each new thread opens its own connection
            assert q.get(job_id) is not None
            q.position(job_id)

        burst(poll)
        now[0] += 25 * 3600  # past the record TTL and the idempotency keys' 24 h
        q.purge_expired()
        sizes.append(path.stat().st_size)
        fds.append(open_fds_under(directory))
    q.close()
    return {
        "bursts": bursts,
        "jobs_per_burst": n,
        "polling_threads_per_burst": THREADS_PER_BURST,
        "file_bytes_after_each_purge": sizes,
        "open_fds_after_each_burst": fds,
    }


def run(quick: bool = False) -> dict[str, Any]:
    n = 200 if quick else 2000
    if shutil.which("redis-server") is None or shutil.which("redis-benchmark") is None:
        return {"error": "redis-server and redis-benchmark are needed (Debian: redis-server redis-tools)"}
    result: dict[str, Any] = {"jobs": n}
    with tempfile.TemporaryDirectory(prefix="bench-queue-") as tmp:
        proc, port = _start_redis(Path(tmp))
        try:
            client = redis.Redis(port=port, decode_responses=True)
            result["redis_benchmark_xadd"] = [
                _redis_benchmark_xadd(port, n * 10, 1),
                _redis_benchmark_xadd(port, n * 10, 50),
            ]
            client.flushall()
            result |= _per_job_figures(client, port, n, quick)
            depths = (0, 1_000, 10_000) if quick else (0, 10_000, 100_000)
            result["poll_by_depth"] = _poll_by_depth(port, depths, batches=5 if quick else 9)
            result["redis_retention"] = _redis_retention(port, 500 if quick else 2000)
            client.flushall()
            # Fair share's claim next to plain FIFO, 1 / 10 / 1,000 projects, Redis here and SQLite.
            result["fairness"] = bench_fair.run(port, quick=quick)
            rps = result["redis_queue"]["enqueue_per_s"]
            result["enqueue_vs_xadd_1_client"] = round(rps / result["redis_benchmark_xadd"][0]["rps"], 3)
            client.close()
        finally:
            proc.terminate()
            proc.wait(timeout=10)
        result["sqlite_durable"] = _measure_queue(SqliteQueue(Path(tmp) / "durable.db", durable=True), n // 2)
        result["sqlite_normal"] = _measure_queue(SqliteQueue(Path(tmp) / "normal.db", durable=False), n // 2)
        result["sqlite_retention"] = _sqlite_retention(Path(tmp) / "retention", 5, 200 if quick else 1000)
    return result


def _per_job_figures(client: redis.Redis, port: int, n: int, quick: bool) -> dict[str, Any]:
    """The queue's per-job cost on an empty Redis: claim → finish cycles, round trips, idle pick-up and
    sustained jobs/s (each figure on a flushed database)."""
    figures: dict[str, Any] = {"redis_queue": _measure_queue(RedisQueue(client, lease_ttl_s=30), n)}
    client.flushall()
    figures["redis_commands_per_job"] = _commands_per_job(port, max(50, n // 10))
    client.flushall()
    figures["redis_pickup_idle"] = _pickup_idle(port, 100 if quick else 300)
    client.flushall()
    figures["redis_sustained"] = _sustained(port, n)
    return figures


def per_job(quick: bool = False) -> dict[str, Any]:
    """Only the queue's per-job cost on Redis (claim → finish cycles, round trips, idle pick-up)."""
    n = 200 if quick else 2000
    result: dict[str, Any] = {"jobs": n}
    with tempfile.TemporaryDirectory(prefix="bench-queue-") as tmp:
        proc, port = _start_redis(Path(tmp))
        try:
            client = redis.Redis(port=port, decode_responses=True)
            result |= _per_job_figures(client, port, n, quick)
            client.close()
        finally:
            proc.terminate()
            proc.wait(timeout=10)
    return result


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--per-job", action="store_true", help="only the per-job cost of the Redis queue")
    args = parser.parse_args()
    print(json.dumps(per_job(quick=args.quick) if args.per_job else run(quick=args.quick), indent=2))
