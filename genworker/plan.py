"""``genworker plan --gpu-memory-gb N``: the memory plan of every catalog model on an N GB device, as Markdown.

Per model: its runtime profile (with this worker's ``profile_overrides``), the weights of each component as
its real architecture config builds them, and a row per resolution at the longest duration with the peak
under each offload mode and the verdict for the profile's own (fits / needs offload (<mode>) / does not fit).
Hub revisions that are not pinned are listed at the end.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from foundation.core.catalog import ModelSpec
    from pipelines.planning.memory_plan import ModelPlan

__all__ = ["format_plan", "plan_command"]


def _profile_label(plan: ModelPlan, spec: ModelSpec) -> str:
    profile = plan.profile
    parts = [spec.dtype, *(f"{name} {dtype}" for name, dtype in sorted(profile.dtypes.items()))]
    parts.append(f"offload {profile.offload}")
    if profile.vae_tiling:
        parts.append("VAE tiling")
    if profile.attention_backend:
        parts.append(f"attention {profile.attention_backend}")
    if profile.compile:
        parts.append("compile")
    if profile.fp8 != "none":
        parts.append(f"fp8 {profile.fp8}")
    return ", ".join(parts)


def format_plan(plans: list[tuple[ModelSpec, ModelPlan]], device_gb: float, gpu: str | None = None) -> str:
    """The plans as Markdown: a heading and table per model, skipped models and unpinned weights listed."""
    from pipelines.planning.memory_plan import OFFLOAD_MODES, reserve_gb
    from pipelines.runtime.weights import needed

    reserve = reserve_gb(device_gb)
    device = f"{gpu} ({device_gb:.1f} GB as it reports it" if gpu else f"{device_gb:g} GB device ("
    lines = [f"### {device}; usable {device_gb - reserve:.1f} GB after a {reserve:.1f} GB reserve)", ""]
    for spec, plan in plans:
        if plan.skipped:
            lines += [f"- `{spec.id}`: {plan.skipped}", ""]
            continue
        weights = " · ".join(f"{c.name} {c.weight_bytes / 1e9:.2f} GB" for c in plan.components)
        lines += [
            f"**`{spec.id}`** — profile: {_profile_label(plan, spec)}",
            "",
            f"weights: {weights}",
            "",
            "| size (largest ratio) | frames | " + " | ".join(f"offload {m}" for m in OFFLOAD_MODES) + " | "
            f"profile ({plan.profile.offload}) | longest that fits |",
            "|---|---|" + "---|" * len(OFFLOAD_MODES) + "---|---|",
        ]
        for row in plan.rows:
            peaks = " | ".join(f"{row.peak_gb[m]:.1f} GB" for m in OFFLOAD_MODES)
            longest = f"{row.max_seconds} s" if row.max_seconds else "—"
            lines.append(
                f"| {row.resolution} {row.width}x{row.height}, {row.seconds} s | {row.frames} | {peaks} | "
                f"{row.verdict} | {longest} |"
            )
        if plan.extend_gb:
            fits = "fits" if plan.extend_gb <= device_gb - reserve else "does not fit"
            lines += [
                "",
                f"prompt extension (the chat LLM visits the device per call): {plan.extend_gb:.1f} GB, {fits}",
            ]
        lines.append("")
    unpinned = [f"{s.id} ({repo.repo})" for s, _ in plans if not s.tiny for repo in needed(s) if repo.revision is None]
    if unpinned:
        lines.append(
            "Unpinned hub revisions (`genworker weights pull` records the commit it fetched): " + ", ".join(unpinned)
        )
    return "\n".join(lines) + "\n"


def format_summary(plans: dict[str, list[tuple[ModelSpec, ModelPlan]]]) -> str:
    """One Markdown table, a row per model and a column per GPU class: the offload mode to run the model with on
    that class, the least that fits every size at its longest duration (offloading less is faster); "override"
    where it differs from the shipped profile (a ``profile_overrides`` entry). Where no mode fits every size,
    the longest duration that fits per resolution under the shipped profile."""
    from pipelines.planning.memory_plan import GPU_CLASSES, reserve_gb

    classes = list(plans)
    head = " | ".join(f"{gpu} ({GPU_CLASSES[gpu] - reserve_gb(GPU_CLASSES[gpu]):.1f} GB usable)" for gpu in classes)
    lines = [f"| model | profile | {head} |", "|---|---|" + "---|" * len(classes)]
    rows: dict[str, list[str]] = {}
    for gpu in classes:
        usable = GPU_CLASSES[gpu] - reserve_gb(GPU_CLASSES[gpu])
        for spec, plan in plans[gpu]:
            if plan.skipped:
                continue
            rows.setdefault(spec.id, [f"`{spec.id}`", _profile_label(plan, spec)]).append(_cell(plan, usable))
    lines += ["| " + " | ".join(cells) + " |" for cells in rows.values()]
    return "\n".join(lines) + "\n"


def _cell(plan: ModelPlan, usable: float) -> str:
    from pipelines.planning.memory_plan import OFFLOAD_MODES

    for mode in OFFLOAD_MODES:
        if all(row.peak_gb[mode] <= usable for row in plan.rows):
            return mode if mode == plan.profile.offload else f"{mode} (override)"
    return ", ".join(f"{row.resolution} ≤ {row.max_seconds} s" for row in plan.rows)


def plan_command(  # noqa: PLR0917  # typer reads each option from a parameter
    gpu_memory_gb: Annotated[
        float | None, typer.Option("--gpu-memory-gb", min=1.0, help="Device memory in GB, as the device reports it.")
    ] = None,
    gpu: Annotated[
        str | None,
        typer.Option(
            "--gpu", help="A GPU class: its reported memory (rtx4090-24gb, l40s-48gb, h100-80gb, h200-141gb)."
        ),
    ] = None,
    summary: Annotated[
        bool, typer.Option("--summary", help="One table: every model against every GPU class (docs/gpu.md).")
    ] = False,
    model: Annotated[list[str] | None, typer.Option("--model", help="Only these model ids (repeatable).")] = None,
    catalog_path: Annotated[str | None, typer.Option("--catalog", help="Catalog file.")] = None,
    config: Annotated[str | None, typer.Option("--config", help="Worker settings (for profile_overrides).")] = None,
) -> None:
    """Print the memory plan: per model, profile and size, whether it fits a device (--gpu or --gpu-memory-gb)."""
    from foundation.core.errors import CatalogError
    from foundation.settings import load_settings
    from pipelines.planning.memory_plan import GPU_CLASSES, plan_model

    if summary == (gpu is not None or gpu_memory_gb is not None) or (gpu is not None and gpu_memory_gb is not None):
        typer.echo("give one of --gpu CLASS, --gpu-memory-gb N or --summary", err=True)
        raise typer.Exit(2)
    if gpu is not None and gpu not in GPU_CLASSES:
        typer.echo(f"unknown GPU class {gpu!r}; known: {', '.join(GPU_CLASSES)}", err=True)
        raise typer.Exit(2)
    device_gb = GPU_CLASSES[gpu] if gpu is not None else float(gpu_memory_gb or 0.0)  # unused by --summary
    from pipelines.runtime.options import load_model_catalog
    from pipelines.runtime.profile import runtime_profile

    settings = load_settings(config)
    try:
        cat = load_model_catalog(catalog_path or settings.catalog_path)
    except CatalogError as e:
        typer.echo(str(e), err=True)
        raise typer.Exit(2) from e
    unknown = [m for m in model or [] if cat.get(m) is None]
    if unknown:
        typer.echo(f"unknown model ids {unknown}; the catalog has {sorted(cat.models)}", err=True)
        raise typer.Exit(2)
    specs = [cat.models[m] for m in model] if model else list(cat.models.values())
    if summary:
        by_class = {
            name: [(spec, plan_model(spec, runtime_profile(spec, settings.models), gb)) for spec in specs]
            for name, gb in GPU_CLASSES.items()
        }
        typer.echo(format_summary(by_class), nl=False)
        return
    plans = [(spec, plan_model(spec, runtime_profile(spec, settings.models), device_gb)) for spec in specs]
    typer.echo(format_plan(plans, device_gb, gpu), nl=False)
