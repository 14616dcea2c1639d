"""The ``genworker`` command: the one root that assembles every layer. Subcommands live next to what they
run and register here; ``up`` (the embedded service: API + one worker) is the root's own, since it joins both.

Imports stay lazy inside commands: ``import diffusers`` costs seconds and most commands never need it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

__all__ = ["app"]

app = typer.Typer(name="genworker", help="GPU worker daemon and HTTP tier for video generation.", no_args_is_help=True)


@app.command()
def catalog(path: str | None = typer.Option(None, help="Catalog file (default: configs/models.yaml).")) -> None:
    """Validate the catalog and print its models as JSON."""
    from worker.core.catalog import CatalogError, load_catalog

    try:
        cat = load_catalog(path)
    except CatalogError as e:
        typer.echo(str(e), err=True)
        raise typer.Exit(2) from e
    typer.echo(json.dumps({m.id: {"family": m.family, "resolutions": m.resolutions} for m in cat.models.values()}))


@app.command()
def version() -> None:
    """Print the installed genworker version."""
    from importlib.metadata import version as _v

    typer.echo(_v("genworker"))


@app.command("up")
def up_command(
    data_dir: Annotated[Path, typer.Option("--data-dir", help="Where everything lives.")] = Path("var"),
    port: Annotated[int, typer.Option("--port", min=1, max=65535)] = 8000,
    host: Annotated[str, typer.Option("--host")] = "127.0.0.1",
    models_dir: Annotated[
        Path | None, typer.Option("--models-dir", help="Tiny models (default <data-dir>/models).")
    ] = None,
    worker_grace_s: Annotated[float, typer.Option("--worker-grace-s", help="Wait before killing the worker.")] = 20.0,
) -> None:
    """Run the whole service here: API on 127.0.0.1:8000, one worker, SQLite queue, local artifacts."""
    from genworker.embedded import run_embedded

    code = run_embedded(data_dir, host=host, port=port, models_dir=models_dir, grace_s=worker_grace_s)
    raise typer.Exit(code)


# The worker daemon and the one-shot generator (worker/daemon/cli.py).
from worker.daemon import cli as _worker_cli  # noqa: E402

app.command("worker")(_worker_cli.worker_command)
app.command("generate")(_worker_cli.generate_command)

# `genworker client ...`: the client library from a shell (client/cli.py).
from client.cli import app as _client_app  # noqa: E402

app.add_typer(_client_app, name="client")


# The HTTP tier: `genworker api`, `genworker keys ...` (api/cli.py).
from api.cli import register as _register_api  # noqa: E402

_register_api(app)

if __name__ == "__main__":
    app()
