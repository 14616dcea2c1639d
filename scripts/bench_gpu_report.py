"""What ``bench_gpu.py --random-weights`` writes (``Results``) and prints (the plan, the runs, the backends, the
failures), and its figures beside the issue's targets.

Targets (issue 39; random full-size weights, no step caches): Wan 2.1 T2V 14B 480p 81 frames, 40 steps with CFG,
end to end in at most 190 s on one H200 (LightX2V's published 191 s with FP8 + SageAttention2), or at most
5.18 s/step on one H100 (LightX2V's H100 row); the 4-step distilled variant end to end in at most 14 s on one
H200; denoising MFU of at least 50 % in bf16. A target is judged only on the device it names.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import time
from pathlib import Path
from typing import Any

__all__ = ["TARGETS", "Results", "header", "plan_table", "table", "targets"]

HEADLINE = "wan2.1-t2v-14b"
TARGETS = {"e2e_h200_s": 190.0, "step_h100_s": 5.18, "distilled_h200_s": 14.0, "mfu": 0.50}


class Results:
    """What the run measured so far, rewritten to ``out`` (atomically) after every addition."""

    def __init__(self, out: Path | None, header: dict[str, Any]) -> None:
        self.out = out
        self.data: dict[str, Any] = {
            **header,
            "jobs": [],
            "backends": {},
            "dropped": [],
            "failures": [],
            "finished": False,
        }

    def add_job(self, entry: dict[str, Any]) -> dict[str, Any]:
        self.data["jobs"].append(entry)
        self.write()
        return entry

    def add_backend(self, model: str, entry: dict[str, Any]) -> None:
        self.data["backends"].setdefault(model, []).append(entry)
        self.write()

    def drop(self, what: str, why: str) -> None:
        """A phase that did not run (or stopped short): the deadline, or an error."""
        self.data["dropped"].append({"what": what, "why": why})
        self.write()

    def fail(self, what: str, why: str) -> None:
        """Something that ran and came out wrong (a component's dtype changed)."""
        self.data["failures"].append({"what": what, "why": why})
        self.write()

    def write(self) -> None:
        if self.out is None:
            return
        self.data["targets"] = targets(self.data)
        tmp = self.out.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.data, indent=2, default=str) + "\n", encoding="utf-8")
        tmp.replace(self.out)


def header(device: str, dry_run: bool, deadline_s: float) -> dict[str, Any]:
    """What the results start with: the device, the versions, the commit, the deadline."""
    import diffusers
    import torch
    import transformers

    from pipelines.planning.memory_plan import device_memory_gb
    from pipelines.planning.mfu import peak_tflops

    name = torch.cuda.get_device_name(device) if device.startswith("cuda") else f"{platform.processor() or 'cpu'}"
    capability = list(torch.cuda.get_device_capability(device)) if device.startswith("cuda") else None
    return {
        "bench": "bench_gpu.py --random-weights",
        "dry_run": dry_run,
        "device": name,
        "capability": capability,
        "device_memory_gb": device_memory_gb(device),
        "peak_bf16_tflops": peak_tflops(device),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "diffusers": diffusers.__version__,
        "transformers": transformers.__version__,
        "commit": _commit(),
        "started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "deadline_s": deadline_s,
    }


def _commit() -> str | None:
    if os.environ.get("GENWORKER_COMMIT"):
        return os.environ["GENWORKER_COMMIT"]
    try:
        out = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return None
    return out.stdout.strip() or None


def _job(data: dict[str, Any], name: str) -> dict[str, Any] | None:
    return next((j for j in data.get("jobs", []) if j["job"] == name), None)


def targets(data: dict[str, Any]) -> list[dict[str, Any]]:
    """Each target with the run's figure beside it; ``met`` is None where the figure is missing or the device
    is not the one the target is set on."""
    device = str(data.get("device", ""))
    h200, h100 = "H200" in device, "H100" in device
    standard = _job(data, f"{HEADLINE} standard")
    distilled = _job(data, f"{HEADLINE} distilled")
    group = next(iter(standard["groups"].values()), None) if standard else None

    def row(
        figure: str, value: float | None, target: str, limit: float, applies: bool, *, above: bool = False
    ) -> dict[str, Any]:
        met = None if value is None or not applies else (value >= limit if above else value <= limit)
        return {"figure": figure, "value": value, "target": target, "met": met, "judged_here": applies}

    return [
        row(
            "Wan 2.1 14B 480p 81 f, 40 steps, CFG: end to end (s), one H200",
            standard.get("e2e_s_at_target_steps") if standard else None,
            "<= 190 s",
            TARGETS["e2e_h200_s"],
            h200,
        ),
        row(
            "Wan 2.1 14B 480p 81 f, CFG: s/step, one H100",
            group["s_per_step"] if group else None,
            "<= 5.18 s/step",
            TARGETS["step_h100_s"],
            h100,
        ),
        row(
            "Wan 2.1 14B distilled, 4 steps: end to end (s), one H200",
            distilled["e2e_s"] if distilled else None,
            "<= 14 s",
            TARGETS["distilled_h200_s"],
            h200,
        ),
        row(
            "Wan 2.1 14B denoise MFU, bf16 (SDPA)",
            group.get("mfu") if group else None,
            ">= 50 %",
            TARGETS["mfu"],
            group is not None and group.get("mfu") is not None,
            above=True,
        ),
    ]


def _fmt(value: Any, suffix: str = "") -> str:
    if value is None:
        return "—"
    return f"{value:g}{suffix}" if isinstance(value, int | float) else str(value)


def plan_table(data: dict[str, Any]) -> str:
    """Markdown: the jobs in run order, with the offload their memory plan gives, their phases' estimates and their
    budgets (planned: as each job gets it when every job before it used its whole budget; given and used: as run)."""
    plan = data.get("plan", {})
    lines = [
        f"plan: {plan.get('rule')}; peak {_fmt(plan.get('peak_tflops'))} TFLOP/s; memory {_fmt(plan.get('memory_gb'))} "
        f"GB ({plan.get('memory_of')}); deadline {_fmt(data.get('deadline_s'))} s",
        "",
        "| # | job | size | offload (plan peak GB none / model; usable) | phases (estimated s) | estimate s "
        "| budget s (planned / given) | used s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for i, j in enumerate(plan.get("jobs", []), 1):
        peaks = j["plan_peak_gb"]
        memory = f"{j['offload']} ({_fmt(peaks.get('none'))} / {_fmt(peaks.get('model'))}; {_fmt(j['usable_gb'])})"
        phases = "; ".join(f"{k}: {v:g}" for k, v in j["phases_s"].items())
        lines.append(
            f"| {i} | {j['key']} ({j['model']}) | {j['size']} | {memory} | {phases} | {_fmt(j['estimate_s'])} | "
            f"{_fmt(j['budget_s'])} / {_fmt(j.get('budget_given_s'))} | {_fmt(j.get('used_s'))} |"
        )
    return "\n".join(lines)


def table(data: dict[str, Any]) -> str:
    """Markdown: the plan, the runs, the backends, the targets, then what was dropped and what failed (what
    docs/gpu.md's measured table is copied from)."""
    builds = data.get("builds", {})
    head = (
        f"bench_gpu.py --random-weights on {data.get('device')} ({_fmt(data.get('device_memory_gb'))} GB), "
        f"torch {data.get('torch')}, diffusers {data.get('diffusers')}, transformers {data.get('transformers')}, "
        f"commit {data.get('commit')}, {data.get('started_utc')}; deadline {data.get('deadline_s')} s, "
        f"ran {_fmt(data.get('elapsed_s'))} s"
        + (f" (dry run on CPU, {data.get('scale')} widths)" if data.get("dry_run") else "")
    )
    lines = [
        head,
        "",
        plan_table(data),
        "",
        "| job | size | build s | text encode s | s/step (steps timed / recipe) | MFU | decode s "
        "| end to end s | peak GB (plan) | dtypes |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for j in data.get("jobs", []):
        model = j["job"].split()[0]
        steps = "; ".join(
            f"{k}: {_fmt(g['s_per_step'])}"
            + (f" ({g['steps_timed']}/{g['recipe_steps']})" if "recipe_steps" in g else "")
            for k, g in j["groups"].items()
        )
        mfu = (
            "; ".join(
                _fmt(None if g.get("mfu") is None else round(100 * g["mfu"], 1), " %")
                for g in j["groups"].values()
                if "mfu" in g
            )
            or "—"
        )
        e2e = f"{_fmt(j['e2e_s'])}" + (
            f" measured, {j['steps_run']} steps" if j.get("e2e_measured") else " extrapolated"
        )
        if j.get("e2e_s_at_target_steps") is not None:
            e2e += f"; {j['e2e_s_at_target_steps']} at {j['target_steps']} steps"
        if j.get("cut"):
            e2e = f"cut by the deadline after {len(j['step_s'])} steps"
        build = builds.get(model, {}).get("build_s") if not j.get("e2e_measured") else None
        cfg = " (CFG)" if j.get("cfg") else ""
        lines.append(
            f"| {j['job']}{cfg} | {j['size']} | {_fmt(build)} | {_fmt(j['text_encode_s'])} | {steps} | {mfu} | "
            f"{_fmt(j['decode_s'])} | {e2e} | {_fmt(j.get('peak_gb'))} ({_fmt(j.get('plan_peak_gb'))}) | "
            f"{'CHANGED' if j.get('dtype_changes') else 'kept'} |"
        )
    lines += [
        "",
        "| model | attention / precision | forward s | × SDPA | max abs diff | note |",
        "|---|---|---|---|---|---|",
    ]
    for model, rows in data.get("backends", {}).items():
        for r in rows:
            note = r.get("error") or r.get("skipped") or ""
            if "routed" in r:
                note = f"{r['routed']} calls on the kernel, {r['fallback']} on SDPA"
            if "ref_max_abs" in r:
                note = f"reference (max |out| {r['ref_max_abs']:.3g})"
            lines.append(
                f"| {model} | {r['variant']} | {_fmt(r.get('forward_s'))} | {_fmt(r.get('vs_sdpa'))} | "
                f"{_fmt(r.get('max_abs_diff'))} | {note} |"
            )
    lines += ["", "| target | measured | target | met |", "|---|---|---|---|"]
    for t in data.get("targets", []):
        met = {True: "yes", False: "no", None: "not judged here"}[t["met"]]
        lines.append(f"| {t['figure']} | {_fmt(t['value'])} | {t['target']} | {met} |")
    for d in data.get("dropped", []):
        lines.append(f"\ndropped: {d['what']}: {d['why']}")
    for f in data.get("failures", []):
        lines.append(f"\nFAILED: {f['what']}: {f['why']}")
    return "\n".join(lines)
