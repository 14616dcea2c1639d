"""The ``genworker`` command: the one root that assembles every layer. Subcommands live next to what they
run and register here; ``up`` (the embedded service: API + one worker) is the root's own, since it joins both.

Imports stay lazy inside commands: ``import diffusers`` costs seconds and most commands never need it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from foundation.core.harmless import quiet_known_harmless
from genworker_client.typer_app import App

if TYPE_CHECKING:
    from foundation.core.catalog import ModelSpec

__all__ = ["app"]


class _Root(App):
    """The command tree, run as the console script: a settings error is told in one line per bad field and exits
    2 on every command (its traceback only with ``--debug``)."""

    debug = False

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().__call__(*args, **kwargs)
        except Exception as e:
            from foundation.settings import Settings
            from foundation.settings.problems import settings_problems

            problems = settings_problems(e, Settings)
            if not problems or self.debug:
                raise
            for line in problems:
                typer.echo(f"genworker: {line}", err=True)
            raise SystemExit(2) from None


quiet_known_harmless()  # before any command imports torch, diffusers or transformers
app = _Root(name="genworker", help="GPU worker daemon and HTTP tier for video generation.", no_args_is_help=True)


@app.callback()
def _root_options(
    debug: Annotated[bool, typer.Option("--debug", help="On an error, print its whole traceback.")] = False,
) -> None:
    _Root.debug = debug


@app.command("up")
def up_command(
    data_dir: Annotated[
        Path | None,
        typer.Option("--data-dir", help="Where everything lives (default: GENWORKER_DATA_DIR, else ./var)."),
    ] = None,
    port: Annotated[int, typer.Option("--port", min=1, max=65535)] = 8000,
    host: Annotated[str, typer.Option("--host")] = "127.0.0.1",
    models_dir: Annotated[
        Path | None, typer.Option("--models-dir", help="Tiny models (default <data-dir>/models).")
    ] = None,
    worker_grace_s: Annotated[float, typer.Option("--worker-grace-s", help="Wait before killing the worker.")] = 20.0,
) -> None:
    """Run the whole service here: API on 127.0.0.1:8000, one worker, SQLite queue, local artifacts.

    Exit status 2 when the port is taken (checked before anything is built or printed)."""
    from genworker.embedded import run_embedded

    code = run_embedded(data_dir, host=host, port=port, models_dir=models_dir, grace_s=worker_grace_s)
    raise typer.Exit(code)


fleet_app = App(
    help="The distributed mode on one machine: redis-server, SeaweedFS, one API, N workers.", no_args_is_help=True
)
app.add_typer(fleet_app, name="fleet")

_EnvFile = Annotated[Path, typer.Argument(help="The env file: GENWORKER_* for every process, FLEET_* knobs.")]


@fleet_app.command("init")
def fleet_init(
    env_file: _EnvFile = Path("fleet.env"),
    redis_port: Annotated[int, typer.Option(min=1, max=65535)] = 6379,
    s3_port: Annotated[int, typer.Option(min=1, max=65535)] = 8333,
    api_port: Annotated[int, typer.Option(min=1, max=65535)] = 8000,
) -> None:
    """Write a starting env file (loopback Redis and S3, a fresh S3 secret); never overwrites one."""
    from genworker.errors import FleetError
    from genworker.fleet import init_env_file

    try:
        init_env_file(env_file, redis_port=redis_port, s3_port=s3_port, api_port=api_port)
    except FleetError as e:
        typer.echo(f"genworker fleet init: {e}", err=True)
        raise typer.Exit(2) from None
    typer.echo(f"wrote {env_file}; start the fleet with: genworker fleet up {env_file}", err=True)


@fleet_app.command("up")
def fleet_up(
    env_file: _EnvFile = Path("fleet.env"),
    workers: Annotated[
        int | None, typer.Option(min=1, help="Worker processes (default: FLEET_WORKERS, else 2).")
    ] = None,
) -> None:
    """Start redis-server, SeaweedFS, a key, one API and N workers; Ctrl-C drains and stops them all."""
    from genworker.errors import FleetError
    from genworker.fleet import run_fleet

    try:
        code = run_fleet(env_file, workers=workers)
    except FleetError as e:
        typer.echo(f"genworker fleet up: {e}", err=True)
        raise typer.Exit(2) from None
    raise typer.Exit(code)


pipeline_app = App(help="Start a new model family for the generic diffusers adapter.", no_args_is_help=True)
app.add_typer(pipeline_app, name="pipeline")


@pipeline_app.command("new")
def pipeline_new(
    name: Annotated[str, typer.Argument(help="The family's name, e.g. cogvideox (the tiny model is tiny-NAME).")],
    from_diffusers: Annotated[str, typer.Option("--from-diffusers", help="A diffusers pipeline class.")],
    out: Annotated[Path, typer.Option("--out", help="Where NAME/ is written.")] = Path("scaffold"),
) -> None:
    """Write NAME/catalog.yaml, NAME/tiny_NAME.py and NAME/test_NAME.py for CLASS (docs/adding-a-pipeline.md)."""
    from genworker.errors import ScaffoldError
    from genworker.scaffold import write_scaffold

    try:
        written = write_scaffold(name, from_diffusers, out)
    except ScaffoldError as e:
        typer.echo(f"genworker pipeline new: {e}", err=True)
        raise typer.Exit(2) from None
    for path in written:
        typer.echo(str(path))
    typer.echo("next: fill in the recipe (FILL-ME) in catalog.yaml with its sources, then run the test", err=True)


weights_app = App(
    help="Real weights on a GPU node: exactly the files a model loads, at its pinned revision.", no_args_is_help=True
)
app.add_typer(weights_app, name="weights")

_Model = Annotated[str, typer.Argument(help="A real (not tiny) model id of the catalog, e.g. wan2.1-t2v-14b.")]
_Config = Annotated[Path | None, typer.Option("--config", "-c", help="Settings YAML (GENWORKER_* still apply).")]


def _weights_target(model: str, config: Path | None) -> tuple[ModelSpec, Path]:
    from foundation.settings import load_settings
    from pipelines.runtime.options import load_model_catalog

    settings = load_settings(config)
    spec = load_model_catalog(settings.catalog_path).get(model)
    if spec is None:
        typer.echo(f"genworker weights: no model {model!r} in the catalog", err=True)
        raise typer.Exit(2)
    if settings.models.weights_dir is None:
        typer.echo("genworker weights: set models.weights_dir (GENWORKER_MODELS__WEIGHTS_DIR)", err=True)
        raise typer.Exit(2)
    return spec, Path(settings.models.weights_dir)


@weights_app.command("pull")
def weights_pull(
    model: _Model,
    from_cache: Annotated[
        Path | None,
        typer.Option("--from-cache", help="Copy from a directory laid out like the hub cache, offline."),
    ] = None,
    config: _Config = None,
) -> None:
    """Fetch what MODEL loads into models.weights_dir/<hub id> (no unused shards) and record a manifest."""
    from pipelines.errors import ModelLoadError
    from pipelines.runtime.weights import pull

    spec, weights_dir = _weights_target(model, config)
    try:
        pull(spec, weights_dir, from_cache=from_cache, progress=lambda line: typer.echo(line, err=True))
    except ModelLoadError as e:
        typer.echo(f"genworker weights pull: {e}", err=True)
        raise typer.Exit(1) from None


@weights_app.command("verify")
def weights_verify(
    model: _Model,
    quick: Annotated[bool, typer.Option("--quick", help="Presence and sizes only; no hashing.")] = False,
    config: _Config = None,
) -> None:
    """Check that every file MODEL loads is under models.weights_dir, at the pinned revision, intact."""
    from pipelines.errors import ModelLoadError
    from pipelines.runtime.weights import verify

    spec, weights_dir = _weights_target(model, config)
    try:
        problems = verify(spec, weights_dir, quick=quick, progress=lambda line: typer.echo(line, err=True))
    except ModelLoadError as e:
        typer.echo(f"genworker weights verify: {e}", err=True)
        raise typer.Exit(2) from None
    for problem in problems:
        typer.echo(problem)
    if problems:
        raise typer.Exit(1)
    typer.echo(f"{model}: every file it loads is there and intact", err=True)


# The worker daemon and the one-shot generator (worker/cli.py).
from worker import cli as _worker_cli  # noqa: E402

app.command("worker")(_worker_cli.worker_command)
app.command("generate")(_worker_cli.generate_command)

# `genworker plan --gpu-memory-gb N`: the memory plan of the catalog's models (genworker/plan.py).
from genworker.plan import plan_command as _plan_command  # noqa: E402

app.command("plan")(_plan_command)

# `genworker simulate`: every real catalog job at full size on the CPU under fake tensors (genworker/simulate.py).
from genworker.simulate import simulate_command as _simulate_command  # noqa: E402

app.command("simulate")(_simulate_command)

# `genworker client ...`: the client distribution's command line (client/src/genworker_client/cli.py).
from genworker_client.cli import app as _client_app  # noqa: E402

app.add_typer(_client_app, name="client")


# The HTTP tier: `genworker api`, `genworker keys ...` (api/cli.py).
from api.cli import register as _register_api  # noqa: E402

_register_api(app, App)

# `genworker webhooks ...`: endpoints, delivery logs, redelivery, the sender (api/webhooks/cli.py).
from api.webhooks.cli import register as _register_webhooks  # noqa: E402

_register_webhooks(app, App)


# Added last, so --help lists them after the service's commands: a newcomer's first command is `up`.
@app.command()
def catalog(path: str | None = typer.Option(None, help="Catalog file (default: configs/models.yaml).")) -> None:
    """Validate the catalog and print its models as JSON."""
    from foundation.core.errors import CatalogError
    from pipelines.runtime.options import load_model_catalog

    try:
        cat = load_model_catalog(path)
    except CatalogError as e:
        typer.echo(str(e), err=True)
        raise typer.Exit(2) from e
    typer.echo(json.dumps({m.id: {"family": m.family, "resolutions": m.resolutions} for m in cat.models.values()}))


@app.command()
def version() -> None:
    """Print the installed genworker version."""
    from importlib.metadata import version as _v

    typer.echo(_v("genworker"))


if __name__ == "__main__":
    app()
