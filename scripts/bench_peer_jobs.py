"""The peer side of ``scripts/bench_peers.py``: SAQ and RQ consumers, the job functions they run and the
producer loop that times them, run by the peer virtual environment's python (``var/peers-venv``).

It imports nothing from the project: SAQ's ``redis`` extra pins redis<8 while the project runs redis 8,
so the peers get their own venv, where the project's modules (pydantic, redis 8, ...) are not installed.
``drive`` is ``bench_queue.interleaved_pickups``' protocol, with the peers' libraries as producer and
consumer: a consumer process waits in the library's blocking dequeue; the producer builds the job before
the clock starts, sleeps 10 milliseconds (the consumer is idle in its blocking read again), takes
t0 = ``time.perf_counter()`` (CLOCK_MONOTONIC: one clock for every process of the machine), enqueues,
and reads from the consumer's stdout the time taken on the job function's first line; the first 5 jobs
are warm-up. Besides that ``PICK`` line the consumer prints ``BLK`` just before the library's dequeue
call and ``DEQ`` when it returned the job, which splits the pick-up into the wake with the dequeue and
the library's bookkeeping before the job runs, and shows whether the consumer was blocked before t0.

    python scripts/bench_peer_jobs.py drive {saq,rq} --port PORT --jobs N    # JSON samples on stdout
    python scripts/bench_peer_jobs.py consume {saq,rq} --port PORT           # the consumer (drive runs it)

SAQ: one ``Worker``, concurrency 1, ``dequeue_timeout`` 0 (``BLMOVE`` queued → active, no timeout).
RQ: ``SimpleWorker`` (the job runs in the worker's process; the forking ``Worker`` adds a fork per job),
default dequeue timeout: ``BLMOVE`` of its one queue into the intermediate list (``BLPOP`` with several).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from importlib.metadata import version
from pathlib import Path
from typing import Any

WARMUP = 5
QUEUE = "peer"


def _out(tag: str) -> None:
    t = time.perf_counter()
    sys.stdout.write(f"{tag} {t!r}\n")
    sys.stdout.flush()


def pick() -> None:
    """RQ's job: its first line is the moment the job is in the consumer's hands."""
    _out("PICK")


async def saq_pick(ctx: Any) -> None:
    """SAQ's job: its first line is the moment the job is in the consumer's hands."""
    _out("PICK")


# ---------------------------------------------------------------- consumers


def _consume_saq(port: int) -> None:
    from saq import Worker
    from saq.queue.redis import RedisQueue

    async def main() -> None:
        queue = RedisQueue.from_url(f"redis://127.0.0.1:{port}/0", name=QUEUE)
        dequeue = queue.dequeue

        async def timed_dequeue(timeout: float = 0.0, poll_interval: float = 0.0) -> Any:
            _out("BLK")
            job = await dequeue(timeout=timeout, poll_interval=poll_interval)
            if job is not None:
                _out("DEQ")
            return job

        queue.dequeue = timed_dequeue
        await queue.connect()
        await queue.version()  # cached: the server's INFO is not on the first dequeue's path

        async def ready(ctx: Any) -> None:
            print("ready", flush=True)

        worker = Worker(queue, functions=[("saq_pick", saq_pick)], concurrency=1, startup=ready)
        await worker.start()

    asyncio.run(main())


def _consume_rq(port: int) -> None:
    from redis import Redis
    from rq import Queue, SimpleWorker

    dequeue_any = Queue.dequeue_any.__func__

    def timed_dequeue_any(cls: type[Queue], *args: Any, **kwargs: Any) -> Any:
        _out("BLK")
        result = dequeue_any(cls, *args, **kwargs)
        if result is not None:
            _out("DEQ")
        return result

    Queue.dequeue_any = classmethod(timed_dequeue_any)
    conn = Redis(port=port)
    worker = SimpleWorker([Queue(QUEUE, connection=conn)], connection=conn)
    print("ready", flush=True)
    worker.work(logging_level="WARNING", with_scheduler=False)


# ---------------------------------------------------------------- producers


def _producer_saq(port: int) -> tuple[Callable[[], Any], Callable[[Any], Any], Callable[[], None]]:
    from saq import Queue
    from saq.job import Job

    loop = asyncio.new_event_loop()
    queue = Queue.from_url(f"redis://127.0.0.1:{port}/0", name=QUEUE)
    loop.run_until_complete(queue.connect())

    def close() -> None:
        loop.run_until_complete(queue.disconnect())
        loop.close()

    # The job (its key included) is built before the clock starts; enqueue is SAQ's own call.
    return (lambda: Job(function="saq_pick")), (lambda job: loop.run_until_complete(queue.enqueue(job))), close


def _producer_rq(port: int) -> tuple[Callable[[], Any], Callable[[Any], Any], Callable[[], None]]:
    from redis import Redis
    from rq import Queue

    conn = Redis(port=port)
    queue = Queue(QUEUE, connection=conn)
    # The Job object (id, function path) is built before the clock starts; enqueue_job saves and pushes it.
    return (lambda: queue.create_job("bench_peer_jobs.pick")), queue.enqueue_job, conn.close


_PRODUCERS = {"saq": _producer_saq, "rq": _producer_rq}
_CONSUMERS = {"saq": _consume_saq, "rq": _consume_rq}


def drive(library: str, port: int, n: int) -> dict[str, Any]:
    """Seconds from t0 (just before the enqueue call) to the job function's first line and to the
    library's dequeue returning, per job, for ``n`` jobs after the warm-up, one at a time into an idle
    consumer; and how many jobs found the consumer not yet back in its blocking dequeue at t0."""
    make, enqueue, close = _PRODUCERS[library](port)
    consumer = [sys.executable, str(Path(__file__).resolve()), "consume", library, "--port", str(port)]
    with tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(consumer, stdout=subprocess.PIPE, stderr=err, text=True)
        assert proc.stdout is not None
        picked_s: list[float] = []
        dequeued_s: list[float] = []
        not_blocked = 0
        try:
            while proc.stdout.readline().strip() != "ready":
                if proc.poll() is not None:
                    err.seek(0)
                    raise RuntimeError(f"{library} consumer exited: {err.read()[-2000:]}")
            for i in range(n + WARMUP):
                job = make()
                time.sleep(0.01)  # the consumer is back in its blocking read
                t0 = time.perf_counter()
                enqueue(job)
                marks: dict[str, float] = {}
                while "PICK" not in marks:
                    line = proc.stdout.readline()
                    if not line:
                        err.seek(0)
                        raise RuntimeError(f"{library} consumer closed its stdout: {err.read()[-2000:]}")
                    tag, _, value = line.strip().partition(" ")
                    if tag in ("BLK", "DEQ", "PICK"):
                        marks[tag] = float(value)
                if i < WARMUP:
                    continue
                picked_s.append(marks["PICK"] - t0)
                dequeued_s.append(marks["DEQ"] - t0)
                not_blocked += int(marks.get("BLK", t0) >= t0)
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            close()
    return {
        "library": library,
        "version": version(library),
        "redis_py": version("redis"),
        "hiredis": version("hiredis"),
        "python": sys.version.split()[0],
        "jobs": n,
        "job_first_line_s": picked_s,
        "dequeue_returned_s": dequeued_s,
        "not_blocked_at_enqueue": not_blocked,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("role", choices=["drive", "consume"])
    parser.add_argument("library", choices=sorted(_PRODUCERS))
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--jobs", type=int, default=200)
    args = parser.parse_args()
    if args.role == "consume":
        _CONSUMERS[args.library](args.port)
    else:
        print(json.dumps(drive(args.library, args.port, args.jobs)))


if __name__ == "__main__":
    main()
