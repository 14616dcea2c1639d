"""Idle pick-up of peer Python job queues (SAQ, RQ's ``SimpleWorker``) next to ours and the bare Redis
Streams floor, on this machine and in one run: is our pick-up time the queue's cost or the machine's?
(issue 17).

Every figure has ``bench_queue.interleaved_pickups``' protocol: a consumer process waits in its blocking
read, the job is built before the clock starts, the producer sleeps 10 milliseconds (the consumer is idle again),
takes t0 and enqueues; the consumer reports ``time.perf_counter`` (CLOCK_MONOTONIC, one clock for every
process of the machine) at its pick-up; the first 5 jobs are warm-up. Where the pick-up is read differs:

- ours: ``bench_queue._pickup_idle`` on a fresh redis-server, to ``claim()`` returning with the job
  started (``running``, lease taken), with its own bare-Streams floor on that server;
- SAQ and RQ (``scripts/bench_peer_jobs.py``): to the job function's first line, and to the library's
  dequeue call returning (SAQ ``Queue.dequeue``: ``BLMOVE`` queued → active, then the job's ``GET``;
  RQ ``Queue.dequeue_any``: ``BLMOVE`` of its one queue, ``BLPOP`` with several);
- raw Streams: ``XADD`` → a bare ``XREADGROUP BLOCK`` returning (``bench_queue._RAW_CONSUMER``), on the
  peers' server.

Each on an idle machine, then with every core kept busy by nice-19 spinners (``bench_load.busy_cores``:
on this VM waking a halted core is the largest cost). SAQ's ``redis`` extra pins redis<8 and the project
runs redis 8, so the peers run from their own venv (``--peer-python``; ``make bench-peers`` makes
``var/peers-venv``): this script runs under the project's venv, and the peers' producer loop and
consumers (``bench_peer_jobs.py``, no project imports) under the peer python, one subprocess per figure.

``python scripts/bench_peers.py [--jobs N] [--peer-python PATH]`` prints the figures as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from importlib.metadata import version
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from scripts.bench_load import busy_cores  # noqa: E402
from scripts.bench_queue import _percentiles_ms, _pickup_idle, _start_redis, raw_streams_pickups  # noqa: E402

PEER_JOBS = ROOT / "scripts" / "bench_peer_jobs.py"
PEERS = ("saq", "rq")
WAITS = {
    "ours": "XREAD BLOCK on the model's stream, pipelined with claim.lua (the job started in the wake's reply)",
    "saq": "BLMOVE queued -> active list (no timeout), then GET of the job",
    "rq": "BLMOVE of its one queue into the intermediate list (BLPOP when listening on several)",
    "raw_streams": "XREADGROUP BLOCK, XACK after the pick-up",
}


@contextmanager
def _redis_server() -> Iterator[int]:
    directory = Path(tempfile.mkdtemp(prefix="bench-peers-"))
    proc, port = _start_redis(directory)
    try:
        yield port
    finally:
        proc.terminate()
        proc.wait()
        shutil.rmtree(directory, ignore_errors=True)


def _raw_streams(port: int, n: int, tag: str) -> dict[str, Any]:
    """``_pickup_pair``'s floor: ``XADD`` of a payload the size of ours → a bare consumer's ``XREADGROUP``."""
    return {"xreadgroup_returned": _percentiles_ms(raw_streams_pickups(port, n, tag))}


def _peer(peer_python: str, library: str, port: int, n: int) -> dict[str, Any]:
    """One peer's figures: its producer loop and consumer run under the peer python."""
    args = [peer_python, str(PEER_JOBS), "drive", library, "--port", str(port), "--jobs", str(n)]
    done = subprocess.run(args, capture_output=True, text=True, cwd=ROOT, timeout=600, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{library}: {' '.join(args)} exited {done.returncode}: {done.stderr[-2000:]}")
    samples = json.loads(done.stdout)
    return {
        "job_first_line": _percentiles_ms(samples["job_first_line_s"]),
        "dequeue_returned": _percentiles_ms(samples["dequeue_returned_s"]),
        "not_blocked_at_enqueue": samples["not_blocked_at_enqueue"],
        "versions": {key: samples[key] for key in ("version", "redis_py", "hiredis", "python")},
    }


def _peers_round(peer_python: str, port: int, n: int, tag: str) -> dict[str, Any]:
    figures = {"raw_streams": _raw_streams(port, n, tag)}
    for library in PEERS:
        figures[library] = _peer(peer_python, library, port, n)
    return figures


def _ours(n: int) -> dict[str, Any]:
    with _redis_server() as port:
        figures = _pickup_idle(port, n)

    def row(pair: dict[str, Any]) -> dict[str, Any]:
        return {"claim_returned": pair["pickup"], "raw_streams_same_server": pair["raw_streams_pickup"]}

    return {"idle": row(figures), "busy_cores": row(figures["busy_cores"])}


def _commit() -> str:
    done = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], check=False, capture_output=True, text=True, cwd=ROOT
    )
    return done.stdout.strip() or "unknown"


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def run(n: int, peer_python: str) -> dict[str, Any]:
    """Ours (idle, then busy cores), then the peers and the raw floor on one redis-server (idle, then busy)."""
    started = datetime.now(UTC)
    ours = _ours(n)
    with _redis_server() as port:
        idle = _peers_round(peer_python, port, n, "idle")
        with busy_cores() as spinners:
            busy = _peers_round(peer_python, port, n, "busy")
    server = subprocess.run(["redis-server", "--version"], check=False, capture_output=True, text=True).stdout.split()
    versions = {library: idle[library].pop("versions") for library in PEERS}
    for library in PEERS:
        busy[library].pop("versions")
    libraries: dict[str, Any] = {
        "ours": {"version": f"genworker {version('genworker')} ({_commit()})", "redis_py": version("redis")},
        "saq": {"consumer": "saq.Worker, concurrency 1", **versions["saq"]},
        "rq": {"consumer": "rq.SimpleWorker (the job runs in the worker's process)", **versions["rq"]},
        "raw_streams": {"redis_py": version("redis")},
    }
    for name, entry in libraries.items():
        entry["waits_on"] = WAITS[name]
        entry["idle"] = ours["idle"] if name == "ours" else idle[name]
        entry["busy_cores"] = ours["busy_cores"] if name == "ours" else busy[name]
    return {
        "measured_at": started.isoformat(timespec="seconds"),
        "seconds": round((datetime.now(UTC) - started).total_seconds(), 1),
        "jobs": n,
        "machine": {
            "cpu": _cpu_model(),
            "cores": os.cpu_count(),
            "busy_cores_spinners": spinners,
            "redis_server": next((word.removeprefix("v=") for word in server if word.startswith("v=")), "unknown"),
        },
        "read_at": {
            "ours": "claim() returned, job started (running, lease taken)",
            "peers": "job function's first line (job_first_line) and the library's dequeue returned",
            "raw_streams": "XREADGROUP returned",
        },
        "libraries": libraries,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=200, help="jobs per figure after 5 warm-up jobs")
    parser.add_argument(
        "--peer-python",
        default=str(ROOT / "var" / "peers-venv" / "bin" / "python"),
        help="python of a venv with saq, rq, redis<8 and hiredis (make bench-peers makes var/peers-venv)",
    )
    args = parser.parse_args()
    if not Path(args.peer_python).exists():
        parser.error(f"{args.peer_python} is missing: make bench-peers creates var/peers-venv")
    print(json.dumps(run(args.jobs, args.peer_python), indent=2))


if __name__ == "__main__":
    main()
