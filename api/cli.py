"""``genworker api`` and ``genworker keys ...`` (registered by the root command, ``genworker.cli``)."""

from __future__ import annotations

from contextlib import closing
from pathlib import Path
from typing import Annotated

import typer

from api.keys import KeyStore, RedisKeyStore, Scope, SqliteKeyStore

__all__ = ["register"]

keys_app = typer.Typer(help="Project API keys: create, list, revoke.", no_args_is_help=True)

_DataDir = Annotated[
    Path | None, typer.Option("--data-dir", help="Embedded service data dir (SQLite key store <dir>/keys.db).")
]
_RedisUrl = Annotated[str | None, typer.Option("--redis-url", help="Redis key store (the distributed mode).")]
_Config = Annotated[Path | None, typer.Option("--config", help="YAML settings file (else GENWORKER_CONFIG).")]


def _open_keys(data_dir: Path | None, redis_url: str | None, config: Path | None) -> KeyStore:
    """--redis-url, else --data-dir, else the settings: Redis when the queue is on Redis, else the
    SQLite store under the settings' data dir (default ./var)."""
    if redis_url:
        return RedisKeyStore.from_url(redis_url)
    if data_dir is not None:
        return SqliteKeyStore(data_dir / "keys.db")
    from api.server import open_key_store
    from worker.settings import load_settings

    return open_key_store(load_settings(config))


@keys_app.command("create")
def keys_create(
    project: Annotated[str, typer.Option("--project", help="The project the key acts for.")],
    scope: Annotated[list[Scope], typer.Option("--scope", help="Repeat for several scopes.")],
    data_dir: _DataDir = None,
    redis_url: _RedisUrl = None,
    config: _Config = None,
) -> None:
    """Create a key and print it alone on stdout (it is shown only this once)."""
    if not project.strip():
        raise typer.BadParameter("must not be empty", param_hint="--project")
    with closing(_open_keys(data_dir, redis_url, config)) as keys:
        record, key = keys.create(project, scope)
    typer.echo(f"created {record.id} for project {record.project} ({', '.join(record.scopes)})", err=True)
    typer.echo(key)


@keys_app.command("list")
def keys_list(
    project: Annotated[str | None, typer.Option("--project", help="Only this project's keys.")] = None,
    data_dir: _DataDir = None,
    redis_url: _RedisUrl = None,
    config: _Config = None,
) -> None:
    """List keys (id, project, scopes, created, revoked); never the keys themselves."""
    with closing(_open_keys(data_dir, redis_url, config)) as keys:
        records = keys.list_keys(project)
    for r in records:
        state = f"revoked {r.revoked_at.isoformat(timespec='seconds')}" if r.revoked_at else "active"
        created = r.created_at.isoformat(timespec="seconds")
        typer.echo(f"{r.id}\t{r.project}\t{','.join(r.scopes)}\t{r.display}\t{created}\t{state}")


@keys_app.command("revoke")
def keys_revoke(
    key_id: Annotated[str, typer.Argument(help="The key id (key_...), as `keys list` shows it.")],
    data_dir: _DataDir = None,
    redis_url: _RedisUrl = None,
    config: _Config = None,
) -> None:
    """Revoke a key; requests with it get 401 from then on."""
    with closing(_open_keys(data_dir, redis_url, config)) as keys:
        found = keys.revoke(key_id)
    if not found:
        typer.echo(f"no key {key_id!r}", err=True)
        raise typer.Exit(1)
    typer.echo(f"revoked {key_id}", err=True)


def api_command(
    host: Annotated[str | None, typer.Option(help="Bind address (default: settings api.host).")] = None,
    port: Annotated[int | None, typer.Option(help="Port (default: settings api.port).")] = None,
    config: _Config = None,
) -> None:
    """Run the HTTP API alone over the configured queue, store and key store (distributed mode)."""
    from api.server import build_app, make_server, serve
    from worker.settings import load_settings

    settings = load_settings(config)
    api = settings.api.model_copy(update={k: v for k, v in {"host": host, "port": port}.items() if v is not None})
    settings = settings.model_copy(update={"api": api})
    serve(make_server(build_app(settings), api.host, api.port, log_level=settings.log_level))


def register(app: typer.Typer) -> None:
    app.command("api")(api_command)
    app.add_typer(keys_app, name="keys")
