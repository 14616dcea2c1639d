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


if __name__ == "__main__":
    app()
