"""The fault soak's projects (``scripts/soak_faults.py``): the 10:1 load, the head wait, the starvation check."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

from scripts.soak_faults import HEAVY_SHARE, project_names, project_of, project_waits, starved

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _record(created_s: float, started_s: float) -> dict[str, Any]:
    return {
        "created_at": (T0 + timedelta(seconds=created_s)).isoformat(),
        "started_at": (T0 + timedelta(seconds=started_s)).isoformat(),
    }


def test_the_heavy_project_queues_ten_times_each_other_project() -> None:
    projects = project_names(5)
    counts = Counter(project_of(i, projects) for i in range(1400))
    assert counts == {"heavy": 1000, **{f"light-{n}": 100 for n in range(1, 5)}}
    cycle = HEAVY_SHARE + 4
    for start in range(0, 140, cycle):  # every cycle holds each project's share, the light ones spread
        window = [project_of(i, projects) for i in range(start, start + cycle)]
        assert Counter(window) == {"heavy": HEAVY_SHARE, **{f"light-{n}": 1 for n in range(1, 5)}}
    assert project_names(1) == ["soak"] and project_of(7, ["soak"]) == "soak"


def test_a_projects_own_backlog_is_not_counted_as_starvation() -> None:
    # heavy: 10 jobs created at once, run one after another 1 s each: whole waits up to 9 s, but each waited
    # only for the job before it once it was its project's oldest (head waits 1 s).
    records = {f"h{n}": _record(0, n) for n in range(10)}
    records |= {f"l{p}": _record(0, 0.5) for p in range(1, 5)}  # each other project's job: 0.5 s
    project_of_job = {gid: "heavy" if gid.startswith("h") else f"light-{gid[1:]}" for gid in records}
    waits = project_waits(records, project_of_job)
    assert waits["heavy"]["wait_p95_s"] == 9.0 and waits["heavy"]["head_wait_p95_s"] == 1.0
    assert starved(waits) == []


def test_a_project_whose_head_waits_far_past_the_median_starves() -> None:
    records = {f"l{p}": _record(0, 0.5) for p in range(1, 5)}
    records["starved"] = _record(0, 10)  # its only job waited 10 s while the others waited 0.5 s
    project_of_job = {gid: gid for gid in records}
    assert starved(project_waits(records, project_of_job)) == ["starved"]
