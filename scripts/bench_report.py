"""Render bench/results.json as docs/benchmarks.md with tables and PNG charts (matplotlib).

Sections are rendered generically (nested dicts flattened into rows; long sample lists summarised as
count/median/p99) and charted where a section provides the well-known shapes:
- ``stages_s``: {stage: seconds} -> a bar chart of where time goes;
- any ``*_samples_ms``: a list of latencies -> one box plot per list (latency distributions);
- ``rss_mb_by_seconds``: {video seconds: peak RSS MB} -> memory vs video length.
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

__all__ = ["render_report"]


def _fmt(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        if abs(value) >= 1000:
            return f"{value:,.0f}"
        return f"{value:.4g}" if abs(value) >= 0.001 or value == 0 else f"{value:.2e}"
    if isinstance(value, list) and value and all(isinstance(v, int | float) for v in value):
        ordered = sorted(value)
        p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
        return f"n={len(value)}, median={statistics.median(ordered):.4g}, p99={p99:.4g}"
    text = str(value)
    return text if len(text) <= 160 else text[:157] + "..."


def _rows(data: Any, prefix: str = "") -> list[tuple[str, str]]:
    if isinstance(data, dict):
        rows: list[tuple[str, str]] = []
        for key, value in data.items():
            rows.extend(_rows(value, f"{prefix}.{key}" if prefix else str(key)))
        return rows
    return [(prefix, _fmt(data))]


def _find(data: Any, suffix: str, path: str = "") -> list[tuple[str, Any]]:
    found: list[tuple[str, Any]] = []
    if isinstance(data, dict):
        for key, value in data.items():
            here = f"{path}.{key}" if path else str(key)
            if str(key).endswith(suffix):
                found.append((here, value))
            found.extend(_find(value, suffix, here))
    return found


def _charts(results: dict[str, Any], charts_dir: Path) -> list[tuple[str, str]]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    charts_dir.mkdir(parents=True, exist_ok=True)
    made: list[tuple[str, str]] = []
    sections = results.get("sections", {})
    for name, section in sections.items():
        for path, stages in _find(section, "stages_s"):
            if not isinstance(stages, dict) or not stages:
                continue
            fig, ax = plt.subplots(figsize=(7, 3.2))
            ax.barh(list(stages), [float(v) for v in stages.values()])
            ax.set_xlabel("seconds (median)")
            ax.set_title(f"{name}: where time goes ({path})")
            file = charts_dir / f"{name}-{path.replace('.', '-')}.png"
            fig.tight_layout()
            fig.savefig(file, dpi=110)
            plt.close(fig)
            made.append((f"{name}: time per stage", file.name))
    latency = [
        (f"{name}:{path}", values)
        for name, section in sections.items()
        for path, values in _find(section, "_samples_ms")
        if isinstance(values, list) and len(values) >= 3
    ]
    if latency:
        fig, ax = plt.subplots(figsize=(8, 0.6 * len(latency) + 1.5))
        ax.boxplot([v for _, v in latency], orientation="horizontal", tick_labels=[k for k, _ in latency])
        ax.set_xscale("log")
        ax.set_xlabel("milliseconds (log)")
        ax.set_title("latency distributions")
        fig.tight_layout()
        fig.savefig(charts_dir / "latency.png", dpi=110)
        plt.close(fig)
        made.append(("latency distributions", "latency.png"))
    for name, section in sections.items():
        found = [(p, s) for p, s in _find(section, "rss_mb_by_seconds") if isinstance(s, dict) and s]
        if found:
            made.append(_memory_chart(plt, name, found, charts_dir / f"{name}-memory.png"))
    return made


def _memory_chart(plt: Any, name: str, series: list[tuple[str, dict[str, Any]]], file: Path) -> tuple[str, str]:
    """All ``*rss_mb_by_seconds`` series of a section on one chart, one line each."""
    fig, ax = plt.subplots(figsize=(7, 3.6))
    for path, points in series:
        xs = sorted(points, key=float)
        ax.plot([float(x) for x in xs], [float(points[x]) for x in xs], marker="o", label=path)
    ax.set_xlabel("video length (s)")
    ax.set_ylabel("peak RSS (MB)")
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=7, loc="lower right")
    ax.set_title(f"{name}: memory vs video length")
    fig.tight_layout()
    fig.savefig(file, dpi=110)
    plt.close(fig)
    return f"{name}: memory vs video length", file.name


# Why a summary target is missed and what would fix it, by the start of the figure's name: rendered
# under the summary for every row of this run whose target is not met (kept next to the renderer so
# the regenerated page never loses the explanation).
MISSED_TARGETS: dict[str, str] = {
    "worker overhead": (
        "**Worker overhead.** The tiny CPU job takes ~0.7 s, so fixed per-job costs count ~100x more than "
        "on a GPU job of a minute. Those costs are small: pick-up ≈ 2 ms and the record writes (running, "
        "progress, finish) a few ms. The rest is denoising: the worker process spends no more CPU per job "
        "than the direct path (1.12 vs 1.20 CPU-s, measured with psutil), but its torch CPU ops take ~10 % "
        "longer in wall time on the 2 shared cores. Torch's CPU thread scheduling next to the worker's "
        "other threads is the likely cause; it is not confirmed. On a GPU node denoising is CUDA kernels and "
        "only the fixed costs remain (< 1 % of a job). Fixed while measuring: a worker hosting two models "
        "blocked on one model's stream at a time, so a job of the other model waited up to 250 ms (pick-up "
        "p99 165 ms; now ≈ 3 ms: `XREAD` on every hosted stream); and the benchmark's own 20 ms poll loop "
        "took CPU from the worker it measured (now 250 ms; figures use the worker's timestamps)."
    ),
    "ffmpeg peak RSS": (
        "**ffmpeg memory, 10 s vs 1 s.** A 1 s clip (24 frames) ends before x264's frame threads and "
        "lookahead are full (10 frames at veryfast, 40 at medium), so the 1 s figure is below ffmpeg's "
        "steady state. Past it ffmpeg's peak stays flat (10 s ÷ 5 s ≈ 1.0-1.06 for both presets, and the "
        "full run's 30 s clip peaks no higher than its 10 s one: media section), so memory is bounded and "
        "does not grow with video length. The encoding process itself stays at 1.00 (frames are streamed, "
        "never held). "
        "A lower `rc-lookahead`/`-threads` would shrink the steady state and the ratio, but it costs speed "
        "and quality, so it is not applied."
    ),
    "API req/s": (
        "**API req/s against the empty async route.** By default every route takes FastAPI's path, creates "
        "commit one by one on SQLite, and Redis round trips take redis-py's asyncio pipeline. Three settings, off "
        "by default, buy the rate back: `api.fast_path` (a plain-ASGI layer answers the poll, the create and the "
        "catalog with what each middleware would add, checked against the framework path request by request in "
        "`tests/e2e/test_poll_path.py`), `queue.redis_wire` (the poll and the rate-limit hit over a lean asyncio "
        "connection: hiredis packs and parses, one write and one wake-up per round trip) and "
        "`queue.sqlite_group_commit` (creates that arrive together share one transaction and one fsync). What each "
        "buys, in one run: 'Micro-optimizations off by default (issue 48)' below. On Redis, redis-server shares "
        "the 2 cores with the API and the load generator, and spends most of its time per poll in the `limits` "
        "moving-window scripts (the benchmark's lifted limit lets each key's window of hits grow)."
    ),
    "API p99": (
        "**API p99 at half rate.** GET stays at 2-6 ms. A create at half rate (now 2-3x the old maximum) "
        "waits for the batch being committed and then its own: two fsyncs of a shared virtual disk on "
        "SQLite; four round trips on Redis (limiter, idempotency `SET NX`, the create's pipeline, the position) on a "
        "process sharing 2 cores with the load generator and redis-server. p50 is 1.4-2.7 ms; quiet runs "
        "gave 5-8 ms p99. Folding the idempotency reservation into `commit.lua` would remove one round trip."
    ),
    "queue pick-up": (
        "**Idle pick-up.** A claim is one round trip from the wake: the wait is `XREAD BLOCK` sent with "
        "`claim.lua` in one write, which Redis runs the moment the read returns, and `claim.lua` also starts "
        "a plain queued job (the running record rewritten at its head and tail only, byte for byte what "
        "`records.started` writes: `tests/integration/test_claim_start.py`); claims and commits skip "
        "redis-py's pipeline (`foundation/queue/redis/round_trip.py`). What is left is mostly this VM's: a core "
        "with nothing to run halts (guest halt-polling is off here), and waking it costs more than the work "
        "after it, and more or less from one minute to the next as the host's load drifts. So the row "
        "takes our pick-up and bare Streams' (an `XADD` waking a bare `XREADGROUP`) job by job in turn: "
        "bare Streams alone took 0.15-0.65 ms on an idle machine over one session, and ours stays at about "
        "2x it (the ratio column; 2-3x before the create and the claim lost some of the Python and Lua noted "
        "below), so the target is met where bare Streams wakes in under ~0.4 ms. The second row keeps the "
        "cores from halting with one nice-19 spinner per core (`scripts/bench_load.py`), which yields to any "
        "woken process at once; there the target is met. Timed inside an idle consumer, the work above the "
        "floor is Python and Lua run cold after the 10 ms idle gap, at 10-20x their warm-loop cost: the "
        "producer's create (~0.3 ms from the call to its bytes on the socket; ~0.04 ms back to back), Redis "
        "running the index writes and the create's `commit.lua` (~0.1-0.15 ms) and then `claim.lua` "
        "(~0.06 ms) before it answers the woken consumer, and the consumer's parse of the started record "
        "(~0.1 ms). Peers measured the same way on this machine "
        "and in one run (`make bench-peers`, 2026-11-26 20:25 UTC, p50 on an idle machine / cores kept "
        "busy): ours 0.718 / 0.451 ms to `claim()` returning with the job started, SAQ 0.638 / 0.626 ms and "
        "RQ's SimpleWorker 1.024 / 0.855 ms to their job function's first line, raw Streams 0.243 / "
        '0.088 ms (docs/benchmarks.md, "Peer queues, same machine").'
    ),
    "daemon pick-up": (
        "**Daemon pick-up.** The queue's pick-up above, then the worker's part: the claim's reply reaching "
        "the GPU thread and its parse (~0.4 ms from the claim's `started_at`, the wake-up included), then "
        "~0.5 ms of the daemon's own work before `denoise`, each piece run cold after the idle gap at 10-20x "
        "its warm-loop cost: the lease, the metrics and the `claimed` line ~0.19 ms, the strict re-check "
        "and `resolve` ~0.18 ms (now once per parameter set: `worker/resolutions.py`), stage "
        "bookkeeping ~0.15 ms (the denoising stage's write goes out on another thread while the model "
        "starts). No round trip is left on this path. The workers run at the default log level (INFO); "
        "their log lines no longer wake the writer thread. The row's baseline is a bare-Streams pick-up "
        "taken after each job on the same server (the host's wake-up cost then): the daemon stays at ~3x "
        "it. With the cores kept busy the target is met."
    ),
}


def _missed_notes(summary: list[dict[str, Any]]) -> list[str]:
    notes: list[str] = []
    for prefix, text in MISSED_TARGETS.items():
        if any(str(r.get("figure", "")).startswith(prefix) and r.get("met") == "NO" for r in summary):
            notes += [text, ""]
    return ["## Missed targets: why, and what would fix them", "", *notes] if notes else []


# Everything from this line on in docs/benchmarks.md is kept as it is when the report is rendered again:
# figures of benchmarks that ``make bench`` does not run (e.g. scripts/bench_sse.py's 1,000 streams).
KEPT_MARKER = "<!-- Measured outside make bench: kept as is when scripts/bench_report.py renders this page. -->"


def _kept_tail(docs_path: Path) -> list[str]:
    if not docs_path.exists():
        return []
    text = docs_path.read_text(encoding="utf-8")
    start = text.find(KEPT_MARKER)
    return [] if start < 0 else [*text[start:].rstrip("\n").split("\n"), ""]


def render_report(results: dict[str, Any], *, docs_path: Path, charts_dir: Path) -> None:
    machine = results.get("machine", {})
    lines = [
        "# Benchmarks",
        "",
        "Generated by `scripts/bench.py` (`make bench`, or `make bench-quick` for the short run). Every figure",
        "sits next to its baseline measured in the same run; compare ratios and medians, not absolute times.",
        "",
        f"- run: {results.get('started_at')} — `{results.get('command')}`, {results.get('wall_s')} s in all",
        f"- machine: {machine.get('cpu')}, {machine.get('cores')} cores, {machine.get('memory_gib')} GiB,"
        f" Python {machine.get('python')}, torch {machine.get('torch')}, GPU: {machine.get('cuda') or 'none'}",
        "- reproduce: `make bench` (full) or `make bench-quick`",
        "",
    ]
    summary = results.get("summary")
    if isinstance(summary, list) and summary:
        lines += ["## Summary", "", "| figure | value | baseline | ratio | target | met |", "|---|---|---|---|---|---|"]
        for row in summary:
            lines.append(
                f"| {row.get('figure')} | {_fmt(row.get('value'))} | {_fmt(row.get('baseline'))} |"
                f" {_fmt(row.get('ratio'))} | {row.get('target', '')} | {row.get('met', '')} |"
            )
        lines.append("")
        lines += _missed_notes(summary)
    charts = _charts(results, charts_dir)
    if charts:
        lines += ["## Charts", ""]
        rel = charts_dir.relative_to(docs_path.parent)
        lines += [f"![{title}]({rel}/{file})" for title, file in charts]
        lines.append("")
    for name, section in results.get("sections", {}).items():
        lines += [f"## {name}", ""]
        notes = section.get("notes") if isinstance(section, dict) else None
        if notes:
            lines += [str(notes), ""]
        lines += ["| figure | value |", "|---|---|"]
        lines += [f"| {k} | {v} |" for k, v in _rows(section) if not k.startswith("notes")]
        lines.append("")
    lines += _kept_tail(docs_path)
    docs_path.parent.mkdir(parents=True, exist_ok=True)
    docs_path.write_text("\n".join(lines), encoding="utf-8")
