"""The ``genworker worker`` and ``genworker generate`` commands (registered in ``worker.cli``).

Exit codes: 0 done; 1 the job failed (pipeline, encoder; with ``--jobs``: any job) or the worker hit a fatal
error; 2 bad input or configuration (a coded rejection is printed as ``code: message``).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

if TYPE_CHECKING:
    from PIL.Image import Image
    from rich.progress import Progress, TaskID

    from foundation.core.contract import Stage
    from foundation.core.errors import RequestRejected
    from foundation.core.resolve import ResolvedJob
    from foundation.settings import Settings
    from worker.generate import GenerateOptions

__all__ = ["generate_command", "worker_command"]

_CONFIG_HELP = "YAML settings file (GENWORKER_* environment variables override it)."


_ConfigOption = Annotated[Path | None, typer.Option("--config", "-c", help=_CONFIG_HELP)]


def worker_command(config: _ConfigOption = None) -> None:
    """Run the worker daemon: claim jobs of the hosted models until SIGTERM (a second one stops at once)."""
    import logging

    from foundation.settings import load_settings, state_paths
    from worker.logs import configure_logging
    from worker.loop import run_worker

    settings = load_settings(config)
    configure_logging(settings.log_level)
    logging.getLogger("genworker.worker").info("state", extra=state_paths(settings))
    if settings.models.gpus_per_job > 1:  # one job across the node's GPUs: rank 0 works, the others follow
        from pipelines.errors import ParallelSetupError
        from pipelines.runtime import context_parallel
        from pipelines.runtime.options import load_model_catalog

        try:
            group = context_parallel.join(settings.models.gpus_per_job)
        except ParallelSetupError as e:
            typer.echo(f"invalid configuration: {e}", err=True)
            raise typer.Exit(2) from None
        if group.rank > 0:
            raise typer.Exit(context_parallel.follow(load_model_catalog(settings.catalog_path), settings.models))
        try:
            raise typer.Exit(run_worker(settings))
        finally:
            context_parallel.leave()
    raise typer.Exit(run_worker(settings))


_JOBS_HELP = (
    "Many jobs in this process, each model loaded once: a file of one JSON object per line, holding this "
    "command's options by name (model, prompt, image, mode, variant, resolution, ratio, duration, audio, "
    "prompt_extend, seed, negative_prompt). Job N (from 1) writes N.mp4 into --out-dir; one JSON line per job."
)


def generate_command(
    *,
    model: Annotated[str | None, typer.Option(help="Model id from the catalog, e.g. tiny-wan.")] = None,
    prompt: Annotated[str | None, typer.Option(help="Text prompt.")] = None,
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="Where to write the MP4 (poster: .jpg). Default: out.mp4.")
    ] = None,
    image: Annotated[Path | None, typer.Option(help="Input image of image_to_video: a JPEG, PNG or WebP file.")] = None,
    mode: Annotated[
        str | None, typer.Option(help="Generation mode (default: image_to_video with --image, else text_to_video).")
    ] = None,
    variant: Annotated[str | None, typer.Option(help="Variant (recipe) of the mode (default: standard).")] = None,
    resolution: Annotated[str | None, typer.Option(help="Resolution label, e.g. 144p (default: the model's).")] = None,
    ratio: Annotated[str | None, typer.Option(help="Aspect ratio, e.g. 16:9 (default: the model's).")] = None,
    duration: Annotated[int | None, typer.Option(help="Seconds of video (default: the model's).")] = None,
    audio: Annotated[bool | None, typer.Option("--audio/--no-audio", help="Generate audio (models that can).")] = None,
    prompt_extend: Annotated[
        bool | None, typer.Option("--prompt-extend/--no-prompt-extend", help="Extend the prompt.")
    ] = None,
    seed: Annotated[int | None, typer.Option(help="Seed (default: random).")] = None,
    negative_prompt: Annotated[str | None, typer.Option(help="Negative prompt (default: the model's).")] = None,
    preview: Annotated[
        Path | None,
        typer.Option(help="Write the live preview here while it denoises (a JPEG, replaced by each newer one)."),
    ] = None,
    jobs: Annotated[Path | None, typer.Option("--jobs", help=_JOBS_HELP)] = None,
    out_dir: Annotated[Path, typer.Option("--out-dir", help="Where the videos of --jobs go.")] = Path("."),
    config: _ConfigOption = None,
) -> None:
    """Generate one video in this process (same path as the worker, no queue or store), or --jobs many."""
    from foundation.core.errors import JobError, RequestRejected, WorkerFault
    from foundation.settings import load_settings
    from worker.generate import GenerateOptions, generate_once
    from worker.logs import configure_logging

    given: dict[str, Any] = {"model": model, "prompt": prompt, "image": image, "mode": mode, "variant": variant}
    given |= {"resolution": resolution, "ratio": ratio, "duration": duration, "audio": audio}
    given |= {"prompt_extend": prompt_extend, "seed": seed, "negative_prompt": negative_prompt}
    given = {k: v for k, v in given.items() if v is not None}
    if jobs is not None and (given or output is not None or preview is not None):  # refused, not ignored
        typer.echo(f"--jobs takes every job from its file; drop --{next(iter(given), 'output or --preview')}", err=True)
        raise typer.Exit(2)
    if jobs is None and (model is None or prompt is None):
        typer.echo("missing option: --model and --prompt (or --jobs FILE)", err=True)
        raise typer.Exit(2)
    settings = load_settings(config)
    configure_logging("WARNING")
    if jobs is not None:
        raise typer.Exit(_run_jobs(settings, jobs, out_dir))
    try:
        job, fitted = _prepare(settings, GenerateOptions.model_validate(given))
        # Said once the request is valid, since only then is anything written there.
        typer.echo(f"state in {settings.data_dir} (models: {settings.models.tiny_models_dir})", err=True)
        with _ProgressBar() as bar:
            result = generate_once(
                settings,
                job,
                output or Path("out.mp4"),
                on_stage=bar.stage,
                on_step=bar.step,
                image=fitted,
                preview=preview,
            )
    except RequestRejected as e:
        _say_rejected(e)
        raise typer.Exit(2) from None
    except (JobError, WorkerFault) as e:  # a missing ffmpeg or a full disk: said as plainly as a job error
        typer.echo(f"{e.code.value}: {e.message}", err=True)
        raise typer.Exit(1) from None
    typer.echo(json.dumps(result.summary(), default=str))


def _run_jobs(settings: Settings, path: Path, out_dir: Path) -> int:
    """``--jobs``: every line is checked first (a refused one stops the batch before any model loads, exit 2),
    then the jobs run in order on one model cache. A failed job is reported on its line with the code a worker
    would record (``worker.verdict``) and the batch goes on; the exit status is 1 when any failed."""
    from foundation.core.errors import ErrorCode, RequestRejected
    from pipelines.runtime.cache import ModelCache
    from worker.generate import generate_once
    from worker.memory import planned_peak
    from worker.verdict import classify

    try:
        prepared = _prepare_jobs(settings, path)
    except RequestRejected as e:
        _say_rejected(e)
        return 2
    cache = ModelCache(settings.models, planned_peak=planned_peak(settings))
    failed = 0
    for n, job, fitted in prepared:
        try:
            result = generate_once(settings, job, out_dir / f"{n}.mp4", image=fitted, cache=cache)
        except Exception as e:  # a pipeline that raises (a missing package, a model bug) fails its job alone
            failed += 1
            verdict = classify(e)
            code = (verdict.code or ErrorCode.internal_error).value
            typer.echo(json.dumps({"job": n, "error": {"code": code, "message": verdict.message}}))
            continue
        typer.echo(json.dumps({"job": n, **result.summary()}, default=str))
    return 1 if failed else 0


def _prepare_jobs(settings: Settings, path: Path) -> list[tuple[int, ResolvedJob, Image | None]]:
    """Every job of the file resolved (its image fitted), or the first ``RequestRejected``, naming its job."""
    from foundation.core.errors import RequestRejected

    prepared: list[tuple[int, ResolvedJob, Image | None]] = []
    for n, options in _read_jobs(path):
        try:
            prepared.append((n, *_prepare(settings, options)))
        except RequestRejected as e:
            raise RequestRejected(e.code, f"{path} job {n}: {e.message}", e.param) from None
    return prepared


def _read_jobs(path: Path) -> list[tuple[int, GenerateOptions]]:
    """The numbered jobs of a ``--jobs`` file (blank lines skipped), or ``RequestRejected`` naming the line."""
    from pydantic import ValidationError

    from foundation.core.errors import ErrorCode, RequestRejected
    from worker.generate import GenerateOptions

    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise RequestRejected(ErrorCode.invalid_request, f"cannot read {path}: {e.strerror or e}", "--jobs") from None
    jobs: list[tuple[int, GenerateOptions]] = []
    for line in filter(str.strip, text.splitlines()):
        n = len(jobs) + 1
        try:
            jobs.append((n, GenerateOptions.model_validate_json(line)))
        except ValidationError as e:
            first = e.errors(include_url=False)[0]
            where = ".".join(str(p) for p in first["loc"])
            message = f"{path} job {n}: {where + ': ' if where else ''}{first['msg']}"
            raise RequestRejected(ErrorCode.invalid_request, message, "--jobs") from None
    return jobs


def _prepare(settings: Settings, options: GenerateOptions) -> tuple[ResolvedJob, Image | None]:
    """The resolved job and, for image_to_video, its fitted input image; ``RequestRejected`` before any load."""
    from foundation.core.contract import parse_create_request
    from worker.generate import prepare_job

    body = options.request_body()
    if options.image is None:
        return prepare_job(settings, parse_create_request(body)), None
    return _image_job(settings, body, options.image)


def _say_rejected(e: RequestRejected) -> None:
    typer.echo(f"{e.code.value}: {e.message}" + (f" (param {e.param})" if e.param else ""), err=True)


def _image_job(settings: Settings, body: dict[str, Any], path: Path) -> tuple[ResolvedJob, Image]:
    """An image_to_video job from a local image file, checked as the API checks an upload (same codes and
    limits, ``api.inputs``), and the image fitted to the generation size."""
    import base64

    from foundation.core.contract import StoredImage, parse_create_request
    from foundation.core.errors import ErrorCode, RequestRejected
    from foundation.core.images import check_image
    from foundation.core.resolve import check_inputs, resolve
    from pipelines.runtime.options import load_model_catalog
    from worker.input_image import decode_image, fit_image

    try:
        data = path.read_bytes()
    except OSError as e:
        raise RequestRejected(ErrorCode.invalid_image, f"cannot read {path}: {e.strerror or e}", "--image") from None
    limits = settings.api.inputs
    checked = check_image(data, max_bytes=limits.max_image_bytes, max_pixels=limits.max_image_pixels, param="--image")
    # The request carries the image as the API would receive it, so the mode's inputs are checked the same way.
    uri = f"data:{checked.content_type};base64,{base64.b64encode(checked.data).decode('ascii')}"
    request = parse_create_request({**body, "input": {**body["input"], "image": uri}})
    catalog = load_model_catalog(settings.catalog_path)
    check_inputs(request, catalog)
    stored = StoredImage(
        key=str(path),
        content_type=checked.content_type,
        bytes=len(checked.data),
        sha256=checked.sha256,
        width=checked.width,
        height=checked.height,
    )
    job, _hold = resolve(request, catalog, image=stored)
    return job, fit_image(decode_image(checked.data), job.gen_width, job.gen_height)


class _ProgressBar:
    """A rich progress bar on stderr: the stage as its label, denoising steps as its progress."""

    def __init__(self) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        console = Console(stderr=True, force_terminal=sys.stderr.isatty())
        self._progress: Progress = Progress(
            TextColumn("{task.description:<16}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
            transient=False,
        )
        self._task: TaskID = self._progress.add_task("starting", total=None)

    def __enter__(self) -> _ProgressBar:
        self._progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._progress.stop()

    def stage(self, stage: Stage) -> None:
        self._progress.update(self._task, description=stage.value)

    def step(self, step: int, total: int) -> None:
        self._progress.update(self._task, completed=step, total=total)
