"""``genworker api`` and ``genworker keys ...`` (registered by the root command, ``genworker.cli``)."""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Callable
from contextlib import closing
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from api.api_keys import ApiKey, KeyStore, RedisKeyStore, Scope, SqliteKeyStore, check_project
from api.errors import InvalidProject, WebhookKeyMissing

if TYPE_CHECKING:
    from foundation.settings import Settings

__all__ = ["keys_location", "register"]

log = logging.getLogger("genworker.api")

_DataDir = Annotated[
    Path | None, typer.Option("--data-dir", help="Embedded service data dir (SQLite key store <dir>/keys.db).")
]
_RedisUrl = Annotated[str | None, typer.Option("--redis-url", help="Redis key store (the distributed mode).")]
_Config = Annotated[Path | None, typer.Option("--config", help="YAML settings file (else GENWORKER_CONFIG).")]


def _open_keys(data_dir: Path | None, redis_url: str | None, config: Path | None) -> tuple[KeyStore, str]:
    """The key store and where it lives: --redis-url, else --data-dir, else the settings (Redis when
    the queue is on Redis, else ``<data_dir>/keys.db``: the same default as ``genworker up`` and ``api``)."""
    if redis_url:
        return RedisKeyStore.from_url(redis_url), f"redis {_redacted(redis_url)}"
    if data_dir is not None:
        path = data_dir.expanduser().absolute() / "keys.db"
        return SqliteKeyStore(path), str(path)
    from api.server import open_key_store
    from foundation.settings import load_settings

    settings = load_settings(config)
    return open_key_store(settings), keys_location(settings)


def keys_location(settings: Settings) -> str:
    """Where ``open_key_store`` keeps the keys, for the line a command prints (no password shown)."""
    from api.server import keys_backend

    if keys_backend(settings) == "sqlite":
        return str(Path(settings.data_dir) / "keys.db")
    return f"redis {_redacted(settings.api.keys_redis_url or settings.queue.redis_url)}"


def _redacted(url: str) -> str:
    """A Redis URL without its password, fit for a terminal."""
    scheme, sep, rest = url.partition("://")
    userinfo, at, host = rest.rpartition("@")
    if not sep or not at:
        return url
    user = userinfo.partition(":")[0]
    return f"{scheme}://{user}:***@{host}" if user else f"{scheme}://***@{host}"


def keys_create(
    project: Annotated[str, typer.Option("--project", help="The project the key acts for.")],
    scope: Annotated[list[Scope], typer.Option("--scope", help="Repeat for several scopes.")],
    data_dir: _DataDir = None,
    redis_url: _RedisUrl = None,
    config: _Config = None,
) -> None:
    """Create a key and print it alone on stdout (it is shown only this once)."""
    try:  # checked before a store is opened: a bad name never needs the backend up
        check_project(project)
    except InvalidProject as e:
        raise typer.BadParameter(str(e), param_hint="--project") from None
    store, where = _open_keys(data_dir, redis_url, config)
    with closing(store) as keys:
        record, key = keys.create(project, scope)
    typer.echo(f"created {record.id} for project {record.project} ({', '.join(record.scopes)}) in {where}", err=True)
    typer.echo(key)


def keys_list(
    project: Annotated[str | None, typer.Option("--project", help="Only this project's keys.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON array instead of a table.")] = False,
    data_dir: _DataDir = None,
    redis_url: _RedisUrl = None,
    config: _Config = None,
) -> None:
    """List keys (id, project, scopes, prefix, created, state); never the keys themselves."""
    store, where = _open_keys(data_dir, redis_url, config)
    with closing(store) as keys:
        records = keys.list_keys(project)
    if as_json:
        typer.echo(json.dumps([r.model_dump(mode="json", exclude={"key_hash"}) for r in records], indent=2))
        return
    _print_keys(records, where)


def _print_keys(records: list[ApiKey], where: str) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"API keys in {where}", title_justify="left")
    for column in ("id", "project", "scopes", "prefix", "created", "state"):
        table.add_column(column, no_wrap=column in ("id", "prefix"))
    for r in records:
        state = f"revoked {r.revoked_at.isoformat(timespec='seconds')}" if r.revoked_at else "active"
        created = r.created_at.isoformat(timespec="seconds")
        table.add_row(r.id, r.project, ", ".join(r.scopes), r.display, created, state)
    # A pipe gets whole rows (rich would wrap them at 80 columns), a terminal its own width.
    Console(width=None if sys.stdout.isatty() else 200).print(table)


def keys_revoke(
    key_id: Annotated[str, typer.Argument(help="The key id (key_...), as `keys list` shows it.")],
    data_dir: _DataDir = None,
    redis_url: _RedisUrl = None,
    config: _Config = None,
) -> None:
    """Revoke a key; requests with it get 401 from then on."""
    store, _ = _open_keys(data_dir, redis_url, config)
    with closing(store) as keys:
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
    from foundation.core.logs import configure_logging
    from foundation.settings import load_settings, state_paths

    settings = load_settings(config)
    api = settings.api.model_copy(update={k: v for k, v in {"host": host, "port": port}.items() if v is not None})
    settings = settings.model_copy(update={"api": api})
    configure_logging(settings.log_level)  # before build_app: what it logs is JSON too
    try:
        app = build_app(settings)
    except WebhookKeyMissing as e:  # a setting to fix, not a crash: say which, without a traceback
        typer.echo(str(e), err=True)
        raise typer.Exit(2) from None
    server = make_server(app, api.host, api.port, log_level=settings.log_level)
    log.info("state", extra={**state_paths(settings), "keys": keys_location(settings)})
    serve(server)


def register(app: typer.Typer, group: Callable[..., typer.Typer] = typer.Typer) -> None:
    """Add ``genworker api`` and ``genworker keys ...`` to the root command. ``group`` makes the ``keys``
    group: the root passes the class of its own groups, so every group's help reads alike."""
    app.command("api")(api_command)
    keys = group(help="Project API keys: create, list, revoke.", no_args_is_help=True)
    keys.command("create")(keys_create)
    keys.command("list")(keys_list)
    keys.command("revoke")(keys_revoke)
    app.add_typer(keys, name="keys")
