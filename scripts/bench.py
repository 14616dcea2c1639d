"""`make bench`: run every benchmark, write bench/results.json and render docs/benchmarks.md.

Each section lives in its own module (`scripts/bench_<name>.py`, a `run(quick: bool) -> dict`) and runs
in a fresh subprocess, so imports, caches and memory of one section never leak into another and one
failing section is reported without losing the rest. Every figure is printed next to the baseline
measured in the same run: these machines are noisy, so compare ratios and medians, not absolute times.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from scripts.bench_report import render_report  # noqa: E402

SECTIONS: dict[str, str] = {
    "queue": "scripts.bench_queue",
    "pipelines": "scripts.bench_pipelines",
    "media": "scripts.bench_media",
    "worker": "scripts.bench_worker",
    "api": "scripts.bench_api",
    "scale": "scripts.bench_scale",
}

_RUNNER = """
import json, sys
sys.path.insert(0, {root!r})
from importlib import import_module
module = import_module({module!r})
kwargs = {{"quick": {quick!r}}}
if {gpu!r}:
    kwargs["gpu"] = True
result = module.run(**kwargs)
with open({out!r}, "w", encoding="utf-8") as f:
    json.dump(result, f, indent=2, default=str)
"""


def run_section(name: str, module: str, *, quick: bool, gpu: bool, workdir: Path, timeout_s: float) -> dict[str, Any]:
    out = workdir / f"{name}.json"
    code = _RUNNER.format(root=str(ROOT), module=module, quick=quick, gpu=gpu, out=str(out))
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
    started = time.perf_counter()
    try:
        proc = subprocess.run(
            [sys.executable, "-c", code],
            check=False,
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout_s:.0f} s"}
    elapsed = time.perf_counter() - started
    if proc.returncode != 0 or not out.exists():
        tail = (proc.stderr or proc.stdout)[-2000:]
        return {"error": f"exit {proc.returncode}", "stderr_tail": tail, "wall_s": round(elapsed, 1)}
    result: dict[str, Any] = json.loads(out.read_text(encoding="utf-8"))
    result.setdefault("wall_s", round(elapsed, 1))
    return result


def _get(data: Any, path: str) -> Any:
    """``data["a"]["b"]`` for ``"a.b"``; None where any part is missing."""
    for part in path.split("."):
        if isinstance(data, list) and part.isdigit() and int(part) < len(data):
            data = data[int(part)]
        elif isinstance(data, dict) and part in data:
            data = data[part]
        else:
            return None
    return data


def _row(figure: str, value: Any, baseline: Any, target: str, met: Any, ratio: Any = None) -> dict[str, Any]:
    if ratio is None and isinstance(value, int | float) and isinstance(baseline, int | float) and baseline:
        ratio = round(value / baseline, 3)
    if value is None:
        met = "not measured"
    elif isinstance(met, bool):
        met = "yes" if met else "NO"
    return {"figure": figure, "value": value, "baseline": baseline, "ratio": ratio, "target": target, "met": met}


def summarize(sections: dict[str, Any]) -> list[dict[str, Any]]:
    """The issue's figures, each next to its baseline from the same run (value ÷ baseline = ratio)."""
    w, q, api, scale, media = (sections.get(k, {}) for k in ("worker", "queue", "api", "scale", "media"))
    rows: list[dict[str, Any]] = []
    if (ratio := _get(w, "overhead_ratio")) is not None:
        e2e, direct = (statistics.median(w[k]) for k in ("queue_e2e_samples_ms", "direct_samples_ms"))
        # The queued run does the direct run's work plus queue hops, so a ratio well under 1 means the
        # baseline was disturbed (a loaded machine), not that the queue is faster: say so.
        met: Any = "suspect: baseline slower than queued run" if ratio < 0.9 else ratio <= 1.05
        rows.append(_row("worker overhead: queue e2e ms vs direct ms (median)", e2e, direct, "≤ 1.05", met))
    p50 = _get(w, "pickup_p50_ms")
    rows.append(_row("pick-up p50 ms, idle worker, Redis", p50, None, "< 10 ms", p50 is not None and p50 < 10))
    bl, base = _get(scale, "backlog.pickup_backlog_p50_ms"), _get(scale, "backlog.pickup_idle_p50_ms")
    rows.append(_row("pick-up p50 ms, 10,000-job backlog vs idle", bl, base, "< 10 ms, ratio ≤ 1.5", _fits(bl, base)))
    deep, empty = _get(scale, "backlog.claim_depth10k_p50_ms"), _get(scale, "backlog.claim_depth0_p50_ms")
    rows.append(_row("queue claim→finish p50 ms, depth 10,000 vs 0", deep, empty, "ratio ≤ 1.5", _fits(deep, empty)))
    on, off = _get(w, "throughput.overlap_on_jobs_per_min"), _get(w, "throughput.overlap_off_jobs_per_min")
    rows.append(_row("jobs/min, overlap on vs off", on, off, "> 1", on is not None and off and on / off > 1))
    warm, cold = _get(w, "loads.warm_get_s"), _get(w, "loads.cold_load_s")
    rows.append(
        _row("model get s, warm vs cold load", warm, cold, "≪ 1", warm is not None and cold and warm < cold / 10)
    )
    paid = _get(scale, "jobs_that_paid_a_load_after_preload")
    rows.append(_row("jobs that paid a load, one hosted model", paid, None, "0", paid == 0))
    mixed, fifo = _get(w, "loads.mixed_batch_jobs_that_paid_a_load"), _get(w, "loads.fifo_would_pay")
    rows.append(_row("jobs that paid a load, two-model batch vs FIFO", mixed, fifo, "< FIFO", _lt(mixed, fifo)))
    for preset, enc in (_get(media, "encode") or {}).items():
        for key, who in (("rss_mb_by_seconds", "encoder process"), ("ffmpeg_rss_mb_by_seconds", "ffmpeg")):
            short, long_ = (_get(enc, f"{key}.{n}") for n in ("1", "10"))
            figure = f"{who} peak RSS MB, 10 s vs 1 s of 720p ({preset})"
            rows.append(_row(figure, long_, short, "≤ 1.2", _le(long_, short, 1.2)))
        fps = _get(enc, "encode_fps_by_seconds.10")
        rows.append(_row(f"encode fps, 10 s 720p ({preset})", fps, None, "", ""))
    bare = _get(api, "bare.rps")
    empty = _get(api, "fastapi_async.rps")
    rows.append(_row("API req/s, FastAPI empty async route vs bare ASGI (the framework alone)", empty, bare, "", ""))
    # Issue 17's targets: GET >= 4,000 req/s and >= 0.5x the empty async route, POST >= 1,500 req/s, p99 at
    # half the measured max rate <= 10 ms; per backend (bench_api's "" = SQLite, "_redis" = Redis).
    for suffix, backend in (("", "SQLite"), ("_redis", "Redis")):
        get, post = _get(api, f"get{suffix}.rps"), _get(api, f"post{suffix}.rps")
        figure = f"API req/s, GET /v1/generations/{{id}}, {backend}, vs FastAPI empty async route"
        met = None if get is None or empty is None else get >= 4000 and get >= 0.5 * empty
        rows.append(_row(figure, get, empty, "≥ 4,000; ratio ≥ 0.5", met))
        rows.append(_row(f"API req/s, POST /v1/generations, {backend}", post, None, "≥ 1,500", _at_least(post, 1500)))
        # Issue 40: the public catalog (no key) is at least as cheap as a poll, in the same run.
        catalog = _get(api, f"models{suffix}.rps")
        figure = f"API req/s, GET /v1/models (no key), {backend}, vs GET /v1/generations/{{id}}"
        rows.append(_row(figure, catalog, get, "≥ 1.0x", None if catalog is None or get is None else catalog >= get))
        for name, label in (("get", "GET /v1/generations/{id}"), ("post", "POST /v1/generations")):
            p99 = _get(api, f"{name}{suffix}.half_rate.p99_ms")
            figure = f"API p99 ms at half the max rate, {label}, {backend}"
            rows.append(_row(figure, p99, None, "≤ 10", _at_most(p99, 10)))
    enq, xadd = _get(q, "redis_queue.enqueue_per_s"), _get(q, "redis_benchmark_xadd.0.rps")
    rows.append(_row("queue enqueue/s vs redis-benchmark XADD (1 client)", enq, xadd, "", ""))
    rt, xp50 = _get(q, "redis_queue.claim_finish.p50_ms"), _get(q, "redis_benchmark_xadd.0.p50_ms")
    rows.append(_row("queue claim→finish p50 ms vs XADD p50 ms", rt, xp50, "", ""))
    # Each pick-up on an idle machine and with every core kept from halting (scripts/bench_load.py).
    for where, prefix in (("idle machine", "redis_pickup_idle"), ("cores kept busy", "redis_pickup_idle.busy_cores")):
        pickup, raw = _get(q, f"{prefix}.pickup.p50_ms"), _get(q, f"{prefix}.raw_streams_pickup.p50_ms")
        figure = f"queue pick-up p50 ms, idle consumer (enqueue → claim) vs raw Streams (XADD → XREADGROUP), {where}"
        rows.append(_row(figure, pickup, raw, "≤ 0.8", _at_most(pickup, 0.8)))
    cycles = _get(q, "redis_queue.claim_finish_cycles_per_s")
    rows.append(
        _row("queue no-op claim→finish cycles/s, one consumer", cycles, None, "≥ 1,300", _at_least(cycles, 1300))
    )
    trips = _get(q, "redis_commands_per_job.worker_client_round_trips_per_job")
    rows.append(_row("queue round trips per job, worker side (claim + finish)", trips, None, "≤ 4", _at_most(trips, 4)))
    for run in _get(w, "daemon_pickup") or []:
        hosted = " + ".join(run.get("hosted", []))
        where = "cores kept busy" if run.get("busy_cores") else "idle machine"
        p50, raw = run.get("pickup_p50_ms"), run.get("raw_streams_pickup_p50_ms")
        figure = f"daemon pick-up p50 ms, enqueue → adapter called ({hosted}) vs raw Streams, {where}"
        rows.append(_row(figure, p50, raw, "≤ 1.5", _at_most(p50, 1.5)))
    poll = _get(q, "poll_by_depth") or {}
    deepest = max((int(k) for k in poll if k.isdigit()), default=None)
    polls = (
        ("redis_usec_per_poll", "Redis µs"),
        ("redis_cpu_usec_per_poll", "Redis CPU µs"),
        ("client_p50_ms", "p50 ms"),
        ("client_p99_ms", "p99 ms"),
    )
    for key, what in polls:
        deep, empty = _get(poll, f"{deepest}.{key}"), _get(poll, f"{deepest}.depth_0_alongside.{key}")
        figure = (
            f"GET poll of the last queued job: {what} per poll, {deepest:,} queued vs 0 (alternating)"
            if deepest
            else what
        )
        rows.append(_row(figure, deep, empty, "≤ 1.2", _le(deep, empty, 1.2)))
    held, after = (
        _get(q, "redis_retention.held_bytes_per_job"),
        _get(q, "redis_retention.after_ttl_and_purge_bytes_per_job"),
    )
    rows.append(
        _row("Redis bytes per finished job: after TTL + purge vs held", after, held, "≈ 0", _le(after, held, 0.05))
    )
    sizes = _get(q, "sqlite_retention.file_bytes_after_each_purge") or []
    if sizes:
        rows.append(
            _row(
                "SQLite file bytes after the last burst vs the first (purged)",
                sizes[-1],
                sizes[0],
                "≤ 1.1",
                _le(sizes[-1], sizes[0], 1.1),
            )
        )
    fds = _get(q, "sqlite_retention.open_fds_after_each_burst") or []
    if fds:
        figure = "SQLite descriptors on its files after the last burst of new polling threads vs the first"
        rows.append(_row(figure, fds[-1], fds[0], "≤ 1.1", _le(fds[-1], fds[0], 1.1)))
    for count in ("2", "4"):
        jps, one = _get(scale, f"workers.{count}.jobs_per_s"), _get(scale, "workers.1.jobs_per_s")
        rows.append(_row(f"jobs/s, {count} workers vs 1 ({os.cpu_count()} cores)", jps, one, "see notes", ""))
    return rows


def _fits(value: Any, baseline: Any) -> bool:
    return value is not None and baseline is not None and value < 10 and value <= 1.5 * max(baseline, 1.0)


def _le(value: Any, baseline: Any, limit: float) -> bool:
    return value is not None and bool(baseline) and value / baseline <= limit


def _ge(value: Any, baseline: Any, limit: float) -> bool:
    return value is not None and bool(baseline) and value / baseline >= limit


def _at_most(value: Any, limit: float) -> bool:
    return value is not None and value <= limit


def _at_least(value: Any, limit: float) -> bool:
    return value is not None and value >= limit


def _lt(value: Any, baseline: Any) -> bool:
    return value is not None and baseline is not None and value < baseline


def machine() -> dict[str, Any]:
    import psutil

    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    import torch

    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "platform": platform.platform(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="short runs (under 3 minutes in all)")
    parser.add_argument("--gpu", action="store_true", help="real models on a GPU node (sections that support it)")
    parser.add_argument("--only", nargs="*", choices=sorted(SECTIONS), help="run only these sections")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results.json"))
    parser.add_argument("--docs", default=str(ROOT / "docs" / "benchmarks.md"))
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per section")
    parser.add_argument("--render-only", action="store_true", help="re-render the docs from an existing --out")
    args = parser.parse_args()

    out = Path(args.out)
    if args.render_only:
        previous: dict[str, Any] = json.loads(out.read_text(encoding="utf-8"))
        previous["summary"] = summarize(previous["sections"])
        render_report(previous, docs_path=Path(args.docs), charts_dir=Path(args.docs).parent / "bench")
        print(f"[bench] rendered {args.docs} from {out}")
        return
    workdir = out.parent / "sections"
    workdir.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {
        "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": "make bench" + (" (--quick)" if args.quick else ""),
        "quick": args.quick,
        "machine": machine(),
        "sections": {},
    }
    if args.only and out.exists():  # a partial run updates those sections of the last full results
        kept = json.loads(out.read_text(encoding="utf-8")).get("sections", {})
        results["sections"] = {k: v for k, v in kept.items() if k not in args.only}
        results["command"] += f" --only {' '.join(args.only)} (other sections from the previous run)"
    for name in args.only or SECTIONS:
        print(f"[bench] {name} ...", flush=True)
        section = run_section(
            name, SECTIONS[name], quick=args.quick, gpu=args.gpu, workdir=workdir, timeout_s=args.timeout
        )
        results["sections"][name] = section
        status = "FAILED: " + section["error"] if "error" in section else f"done in {section.get('wall_s')} s"
        print(f"[bench] {name} {status}", flush=True)
    # Sum of the sections' wall times (for a partial run, including those kept from the previous run).
    results["wall_s"] = round(sum(float(s.get("wall_s", 0)) for s in results["sections"].values()), 1)
    results["summary"] = summarize(results["sections"])
    out.write_text(json.dumps(results, indent=2, default=str), encoding="utf-8")
    render_report(results, docs_path=Path(args.docs), charts_dir=Path(args.docs).parent / "bench")
    print(f"[bench] wrote {out} and {args.docs}")


if __name__ == "__main__":
    main()
