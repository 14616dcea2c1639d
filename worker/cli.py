"""The ``genworker`` command. Subcommands live next to what they run and register here.

Imports stay lazy inside commands: ``import diffusers`` costs seconds and most commands never need it.
"""

from __future__ import annotations

import json

import typer

__all__ = ["app"]

app = typer.Typer(name="genworker", help="GPU worker daemon and HTTP tier for video generation.", no_args_is_help=True)


@app.command()
def catalog(path: str | None = typer.Option(None, help="Catalog file (default: configs/models.yaml).")) -> None:
    """Validate the catalog and print its models as JSON."""
    from worker.catalog import CatalogError, load_catalog

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


# The worker daemon and the one-shot generator (worker/worker_cli.py).
from worker import worker_cli as _worker_cli  # noqa: E402

app.command("worker")(_worker_cli.worker_command)
app.command("generate")(_worker_cli.generate_command)

# `genworker client ...`: the client library from a shell (client/cli.py).
from client.cli import app as _client_app  # noqa: E402

app.add_typer(_client_app, name="client")


# The HTTP tier: `genworker api`, `genworker up`, `genworker keys ...` (api/cli.py).
from api.cli import register as _register_api  # noqa: E402

_register_api(app)

if __name__ == "__main__":
    app()
