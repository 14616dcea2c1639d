"""Fair share by project inside each model pool: the settings and the one rule both backends apply.

A worker's claim takes the next job of the project with the least service among the projects of the
pool that have queued work; a project's own jobs stay first-in first-out. "Service" is a virtual pass
per project (stride scheduling): each job a project is served adds ``job_cost / weight`` to its pass,
and the claim serves the lowest pass (ties: the project id). ``job_cost`` estimates the job's GPU time
from its output's pixel-seconds, so one 10 s 720p clip weighs as much as about 23 one-second 480p ones.
A project that comes back after its queue ran dry starts at the pool's virtual clock (the pass the last
served job started from), or at its own pass while its last turn is not yet worked off: no credit is
saved while idle (it cannot hoard turns), and a newcomer is served within about one turn.

Caps: ``max_running`` (jobs of a project started and not ended in one pool: a project at its cap is
skipped by the claim, its jobs wait) and ``max_queued`` (jobs of a project waiting in one pool: a create
past it raises ``ProjectQueueFull``, nothing is enqueued). Both count per model pool, the unit every
atomic queue step works on (one Redis Cluster slot per pool).

``enabled = False`` is plain FIFO per pool (a single-tenant deployment): creates go straight into the
pool's order and caps are not applied; jobs parked while it was on are still served (nothing is lost).
"""

from __future__ import annotations

import json
from functools import cached_property

from pydantic import BaseModel, ConfigDict, Field

from foundation.core.contract import GenerationRecord
from foundation.core.sizes import SIZE_TABLE, target_size

# The unit of ``job_cost``: one second of 480p 16:9 output.
_UNIT_PIXEL_SECONDS = 832 * 480

__all__ = ["FairShare", "ProjectShare", "charge", "job_cost"]


class ProjectShare(BaseModel):
    """One project's overrides of the pool defaults (``queue.fair.projects.<project id>``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    weight: float | None = Field(default=None, gt=0, le=1000, description="Share of GPU turns (default 1).")
    max_running: int | None = Field(default=None, ge=1, description="Jobs running at once in one model pool.")
    max_queued: int | None = Field(default=None, ge=1, description="Jobs waiting at once in one model pool.")


class FairShare(BaseModel):
    """The ``queue.fair`` settings section."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = Field(
        default=True,
        description="Claims serve the project with the least recent service first (weighted); false: plain FIFO.",
    )
    weight: float = Field(default=1.0, gt=0, le=1000, description="Default weight of a project.")
    # Defaults far above what one machine runs or holds: a single-tenant deployment never meets them.
    max_running: int = Field(default=10_000, ge=1, description="Default cap of a project's running jobs per pool.")
    max_queued: int = Field(default=100_000, ge=1, description="Default cap of a project's waiting jobs per pool.")
    projects: dict[str, ProjectShare] = Field(
        default_factory=dict, description="Per-project overrides, by project id (e.g. a paid tier at weight 4)."
    )

    def weight_of(self, project: str) -> float:
        share = self.projects.get(project)
        return share.weight if share is not None and share.weight is not None else self.weight

    def max_running_of(self, project: str) -> int:
        share = self.projects.get(project)
        return share.max_running if share is not None and share.max_running is not None else self.max_running

    def max_queued_of(self, project: str) -> int:
        share = self.projects.get(project)
        return share.max_queued if share is not None and share.max_queued is not None else self.max_queued

    @cached_property
    def shares(self) -> dict[str, tuple[float, int]]:
        """The overrides as the Redis scripts read them (``lua/fair.lua``): project → (weight, max_running)."""
        return {p: (self.weight_of(p), self.max_running_of(p)) for p in sorted(self.projects)}

    @cached_property
    def shares_json(self) -> str:
        return json.dumps(self.shares)


def job_cost(record: GenerationRecord) -> float:
    """A job's estimated GPU time in units of one second of 480p 16:9 output (its pixel-seconds): what a
    turn of its project costs. GPU time grows at least that fast with size and length; 1 when unknown."""
    p = record.parameters
    if not (p.resolution in SIZE_TABLE and p.ratio in SIZE_TABLE.get(p.resolution, {}) and p.duration_seconds):
        return 1.0
    width, height = target_size(p.resolution, p.ratio)
    return max(0.01, round(p.duration_seconds * width * height / _UNIT_PIXEL_SECONDS, 4))


def charge(pass_: float, cost: float, weight: float) -> float:
    """A project's pass after it is served one job of ``cost`` (the SQLite twin of ``fair.lua``'s top-up)."""
    return pass_ + cost / weight
