"""``genworker simulate``: every real catalog job at full size on the CPU under fake tensors, against the plan.

Per job (each entry x mode x variant at its largest size and longest duration; ``pipelines.simulation.simulate``):
the parameters, each denoiser forward's FLOPs (attention / linear / convolution), the activation peak per phase
(encode / denoise / decode) with the memory plan's figure beside it, the largest tensor, and any component whose
dtype changed. The exit status is 1 when a job fails, a dtype changes, a tensor reaches 2^31 elements, or the
plan is more than 10 % under a simulated phase (weights + activations, offload none); ``--json`` writes every
figure, ``--markdown FILE`` rewrites the computed tables between their markers in FILE (docs/gpu.md);
``--jobs N`` shares the models among N processes (a model runs on one core), those that share a VAE in one.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

if TYPE_CHECKING:
    from foundation.core.catalog import ModelSpec
    from pipelines.simulation.simulate import JobResult

__all__ = ["PLAN_TOLERANCE", "SHORT", "problems", "shares", "simulate_command"]

PLAN_TOLERANCE = 0.10  # the plan may be at most this much under a simulated phase
PHASES = ("encode", "denoise", "decode")
GB = 1e9
# One job per family for ``--short`` (the pytest of make test): model -> (resolution, (mode, variant) pairs).
SHORT: dict[str, tuple[str, list[tuple[str, str]]]] = {
    "wan2.1-t2v-14b": ("480p", [("text_to_video", "standard")]),
    "wan2.2-ti2v-5b": ("720p", [("text_to_video", "standard"), ("image_to_video", "standard")]),
    "ltx-2": ("480p", [("image_to_video", "standard")]),
    "ltx-2.5": ("480p", [("text_to_video", "standard")]),  # the distilled checkpoint, ancestral stage 1
    "hunyuanvideo-1.5-480p": ("480p", [("text_to_video", "standard")]),
    "hunyuanvideo-1.5-i2v-480p": ("480p", [("image_to_video", "fast")]),
}
# Dense bf16 peaks (TFLOP/s) of the device classes the plan knows, for the time floors (vendor datasheets,
# no sparsity; pipelines.planning.mfu.PEAK_BF16_TFLOPS). The RTX 4090 has no datacenter figure there.
FLOOR_DEVICES = {"H100 SXM / H200": 989.4, "L40S": 362.1}
MARKERS = {
    "flops": ("<!-- simulate:flops -->", "<!-- /simulate:flops -->"),
    "memory": ("<!-- simulate:memory -->", "<!-- /simulate:memory -->"),
}


def simulate_command(  # noqa: PLR0917  # typer reads each option from a parameter
    model: Annotated[list[str] | None, typer.Option("--model", help="Only these model ids (repeatable).")] = None,
    short: Annotated[bool, typer.Option("--short", help="One job per family (what make test runs).")] = False,
    json_path: Annotated[Path | None, typer.Option("--json", help="Write every figure to this file.")] = None,
    markdown: Annotated[
        Path | None, typer.Option("--markdown", help="Rewrite the computed tables between their markers here.")
    ] = None,
    catalog_path: Annotated[str | None, typer.Option("--catalog", help="Catalog file.")] = None,
    from_json: Annotated[
        list[Path] | None,
        typer.Option(
            "--from-json", help="Take the simulated figures from earlier --json files (the plan is recomputed)."
        ),
    ] = None,
    jobs: Annotated[
        int, typer.Option("--jobs", min=1, help="Processes to share the models among (one core each).")
    ] = 1,
) -> None:
    """Run every real catalog job at full size on the CPU under fake tensors; compare with the memory plan."""
    from foundation.settings import load_settings
    from pipelines.runtime.options import load_model_catalog

    settings = load_settings(None)
    catalog = load_model_catalog(catalog_path or settings.catalog_path)
    unknown = [m for m in model or [] if m not in catalog.models]
    if unknown:
        typer.echo(f"unknown model ids {unknown}; the catalog has {sorted(catalog.models)}", err=True)
        raise typer.Exit(2)
    specs = [s for s in catalog.models.values() if not s.tiny and not model]
    specs += [catalog.models[m] for m in model or []]  # in the order given
    if short:
        specs = [s for s in specs if s.id in SHORT]
    if jobs > 1 and not from_json:
        from_json = _in_processes(specs, jobs, short=short, catalog_path=catalog_path)
    results: list[JobResult] = []
    for spec, result in _results(specs, short=short, from_json=from_json):
        result.plan_gb = plan_phases(spec, result)
        typer.echo(format_result(result))
        results.append(result)
        if json_path is not None:  # after every job: a sweep cut short keeps what it ran
            json_path.write_text(json.dumps([_as_json(r) for r in results], indent=1) + "\n", encoding="utf-8")
    failed = [f"{r.job.label}: {p}" for r in results for p in problems(r)]
    typer.echo(f"\n{len(results)} jobs, {len(failed)} problems")
    for line in failed:
        typer.echo(f"  {line}")
    if json_path is not None:
        json_path.write_text(json.dumps([_as_json(r) for r in results], indent=1) + "\n", encoding="utf-8")
    if markdown is not None:
        write_markdown(markdown, results)
    if failed:
        raise typer.Exit(1)


def _in_processes(specs: list[ModelSpec], jobs: int, *, short: bool, catalog_path: str | None) -> list[Path]:
    """Run the models in ``jobs`` child processes of this command, each writing its ``--json``; their files.
    A child that fails a job exits 1 and its figures say why (read back here); any other exit is an error."""
    work = Path(tempfile.mkdtemp(prefix="genworker-simulate-"))
    children = []
    for i, group in enumerate(shares(specs, jobs)):
        out, log = work / f"part-{i}.json", work / f"part-{i}.log"
        args = [sys.executable, "-m", "genworker", "simulate", "--json", str(out)]
        args += [a for spec in group for a in ("--model", spec.id)]
        args += ["--short"] if short else []
        args += ["--catalog", catalog_path] if catalog_path else []
        with log.open("wb") as sink:
            children.append((subprocess.Popen(args, stdout=sink, stderr=subprocess.STDOUT), out, log))
    for child, out, log in children:
        if child.wait() not in {0, 1} or not out.exists():
            tail = log.read_text(encoding="utf-8", errors="replace")[-2000:]
            typer.echo(f"a simulate process failed (exit {child.returncode}); its log {log} ends:\n{tail}", err=True)
            raise typer.Exit(2)
    return [out for _, out, _ in children]


def shares(specs: list[ModelSpec], jobs: int) -> list[list[ModelSpec]]:
    """``specs`` in at most ``jobs`` shares of about as many models each, the models with one VAE in one share
    (a process decodes once per VAE, size and length: ``pipelines.simulation.simulate.DECODES``)."""
    from pipelines.planning.random_weights import arch_entries

    groups: dict[str, list[ModelSpec]] = {}
    for spec in specs:
        vae = arch_entries(spec.id).get("vae")
        groups.setdefault(json.dumps(vae, sort_keys=True) if vae else spec.id, []).append(spec)
    out: list[list[ModelSpec]] = [[] for _ in range(min(jobs, len(groups)))]
    for group in sorted(groups.values(), key=len, reverse=True):
        min(out, key=len).extend(group)
    return out


def _results(
    specs: list[ModelSpec], *, short: bool, from_json: list[Path] | None
) -> Iterator[tuple[ModelSpec, JobResult]]:
    """Each model's jobs simulated now, one model at a time, or read back from earlier ``--json`` files."""
    from pipelines.simulation.simulate import result_from_json, sim_jobs, simulate_model

    if from_json:
        stored = [result_from_json(d) for p in from_json for d in json.loads(p.read_text(encoding="utf-8"))]
        by_id = {s.id: s for s in specs}
        order = {s.id: i for i, s in enumerate(specs)}  # the catalog's order, whichever file a model came from
        kept = sorted((r for r in stored if r.job.model in by_id), key=lambda r: order[r.job.model])
        yield from ((by_id[r.job.model], r) for r in kept)
        return
    for spec in specs:
        resolution, wanted = SHORT[spec.id] if short else (None, None)
        jobs = [j for j in sim_jobs(spec, resolution=resolution) if wanted is None or (j.mode, j.variant) in wanted]
        for result in simulate_model(spec, jobs):
            yield spec, result


def plan_phases(spec: ModelSpec, result: JobResult) -> dict[str, float]:
    """The plan's figure per phase for the job's size, everything resident (offload none, as simulated)."""
    from foundation.settings.models import ModelRuntimeSettings
    from pipelines.planning.memory_plan import JobShape, load_components, phase_gb
    from pipelines.runtime.profile import runtime_profile

    profile = runtime_profile(spec, ModelRuntimeSettings())
    comps = load_components(spec, profile)
    if comps is None:
        return {}
    shape = JobShape(result.width, result.height, result.frames, result.job.seconds)
    return phase_gb(spec, profile, comps, shape, "none")


def problems(result: JobResult) -> list[str]:
    """Why a job fails the check: an error, a dtype change, a 2^31 tensor, the plan > 10 % under a phase."""
    from pipelines.simulation.simulate import INT32_ELEMENTS

    if result.error:
        return [f"failed: {result.error}"]
    found = [f"dtype changed: {change}" for change in result.dtype_changes]
    if result.largest[0] >= INT32_ELEMENTS:
        found.append(f"tensor of {result.largest[0]:,} elements (>= 2^31): {result.largest[1]}")
    for phase in PHASES:
        simulated = result.peak_gb(phase)
        planned = result.plan_gb.get(phase)
        if planned is not None and planned < (1 - PLAN_TOLERANCE) * simulated:
            found.append(f"plan {planned:.1f} GB under the simulated {phase} {simulated:.1f} GB")
    return found


def format_result(result: JobResult) -> str:
    """The job's block of the printed report."""
    job = result.job
    head = f"{job.label}: {result.width}x{result.height}x{result.frames} ({result.wall_s:.0f} s)"
    if result.error:
        return f"{head}\n  FAILED: {result.error}"
    lines = [head, f"  parameters {result.params / 1e9:.2f} B, weights {result.weight_bytes / GB:.2f} GB"]
    calls = {(name, shape): n for name, shape, n in result.forward_calls}
    for f in result.forwards:
        lines.append(
            f"  {f.denoiser} {list(f.shape)}: {f.total / 1e15:.3f} PFLOP/forward (attention {f.attention / 1e15:.3f},"
            f" linear {f.linear / 1e15:.3f}, conv {f.conv / 1e15:.3f}) x{calls.get((f.denoiser, f.shape), 0)}"
        )
    lines.append(f"  denoising, whole job: {result.job_flops() / 1e15:.1f} PFLOP")
    for phase in PHASES:
        act = result.activation_bytes.get(phase, 0) / GB
        planned = result.plan_gb.get(phase)
        beside = f", plan {planned:.1f} GB" if planned is not None else ""
        lines.append(f"  {phase:8s} activations {act:6.2f} GB, peak {result.peak_gb(phase):6.1f} GB{beside}")
    if result.decode_from:
        lines.append(f"  (decode figures: {result.decode_from})")
    elements, shape, op = result.largest
    flag = "  >= 2^31 elements" if elements >= 2**31 else ""
    lines.append(f"  largest tensor {list(shape)} ({elements:,} elements, {op}){flag}")
    lines.append("  dtypes unchanged" if not result.dtype_changes else f"  DTYPE CHANGED: {result.dtype_changes}")
    return "\n".join(lines)


def _as_json(result: JobResult) -> dict[str, Any]:
    data = asdict(result)
    data["job_flops"] = result.job_flops()
    data["peak_gb"] = {p: result.peak_gb(p) for p in PHASES}
    data["problems"] = problems(result)
    return data


# ------------------------------------------------------------------------------------------ docs/gpu.md


def flops_table(results: list[JobResult]) -> str:
    """Per job: FLOPs per forward, the whole job's denoising FLOPs, and the time floor at 100 % and 50 % MFU."""
    devices = " | ".join(f"{name} 100 % / 50 %" for name in FLOOR_DEVICES)
    lines = [
        f"| job | size | PFLOP per forward (attention share) | denoising PFLOP | {devices} |",
        "|---|---|---|---|" + "---|" * len(FLOOR_DEVICES),
    ]
    for r in results:
        if r.error:
            continue
        per = ", ".join(f"{f.total / 1e15:.2f} ({f.attention / f.total:.0%})" for f in r.forwards if f.total)
        total = r.job_flops()
        floors = " | ".join(f"{_floor(total, p)} / {_floor(total, p / 2)}" for p in FLOOR_DEVICES.values())
        size = f"{r.width}x{r.height}x{r.frames}"
        lines.append(
            f"| `{r.job.model}` {r.job.mode} {r.job.variant} | {size} | {per} | {total / 1e15:,.1f} | {floors} |"
        )
    return "\n".join(lines) + "\n"


def _floor(flops: float, tflops: float) -> str:
    return f"{flops / (tflops * 1e12):,.0f} s"


def memory_table(results: list[JobResult]) -> str:
    """Per job and phase: simulated peak (weights + live activations) against the plan, offload none."""
    lines = [
        "| job | size | weights | " + " | ".join(f"{p} simulated / plan" for p in PHASES) + " |",
        "|---|---|---|" + "---|" * len(PHASES),
    ]
    for r in results:
        if r.error:
            continue
        cells = " | ".join(f"{r.peak_gb(p):.1f} / {r.plan_gb.get(p, 0.0):.1f} GB" for p in PHASES)
        size = f"{r.width}x{r.height}x{r.frames}"
        lines.append(
            f"| `{r.job.model}` {r.job.mode} {r.job.variant} | {size} | {r.weight_bytes / GB:.1f} GB | {cells} |"
        )
    return "\n".join(lines) + "\n"


def write_markdown(path: Path, results: list[JobResult]) -> None:
    """Rewrite each computed table between its markers in ``path`` (a marker pair that is absent is skipped)."""
    text = path.read_text(encoding="utf-8")
    for key, table in (("flops", flops_table(results)), ("memory", memory_table(results))):
        start, end = MARKERS[key]
        pattern = re.compile(re.escape(start) + r".*?" + re.escape(end), re.DOTALL)
        text = pattern.sub(lambda _: f"{start}\n{table}{end}", text)  # noqa: B023  # used at once
    path.write_text(text, encoding="utf-8")
