"""``genworker webhooks ...``: register endpoints, read their delivery logs, redeliver, run a sender; the
signing secret of a project's per-request webhooks.

Every command opens the webhook store the settings name (``api.webhooks.service``): Redis when the
queue is on Redis, else ``<data_dir>/webhooks.db``; ``--data-dir`` picks an embedded service's directory.
"""

from __future__ import annotations

import json
import logging
import signal
import threading
from collections.abc import Callable
from contextlib import closing
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Annotated

import typer

from api.errors import InvalidProject, WebhookKeyMissing
from api.webhooks.models import EventType

if TYPE_CHECKING:
    from api.webhooks.service import Webhooks
    from foundation.settings import Settings

__all__ = ["register"]

log = logging.getLogger("genworker.webhooks")

_DataDir = Annotated[Path | None, typer.Option("--data-dir", help="Embedded service data dir (<dir>/webhooks.db).")]
_Config = Annotated[Path | None, typer.Option("--config", help="YAML settings file (else GENWORKER_CONFIG).")]


def _settings(data_dir: Path | None, config: Path | None) -> Settings:
    from foundation.settings import load_settings

    if data_dir is None:
        return load_settings(config)
    return load_settings(config, data_dir=str(data_dir.expanduser().absolute()))


def _open(data_dir: Path | None, config: Path | None) -> Webhooks:
    return _open_webhooks(_settings(data_dir, config))


def _open_webhooks(settings: Settings) -> Webhooks:
    """The service, or exit 2 with the message naming the missing setting."""
    from api.webhooks.service import open_webhooks

    try:
        return open_webhooks(settings)
    except WebhookKeyMissing as e:
        typer.echo(str(e), err=True)
        raise typer.Exit(2) from None


def _events(value: str | None) -> list[EventType] | None:
    if not value:
        return None
    try:
        return [EventType(v.strip()) for v in value.split(",") if v.strip()]
    except ValueError:
        allowed = ", ".join(e.value for e in EventType)
        raise typer.BadParameter(f"event types are: {allowed}", param_hint="--events") from None


def add(
    project: Annotated[str, typer.Option("--project", help="The project whose generations are reported.")],
    url: Annotated[str, typer.Option("--url", help="https:// URL of the receiver.")],
    events: Annotated[
        str | None, typer.Option("--events", help="Comma-separated event types (default: all four).")
    ] = None,
    data_dir: _DataDir = None,
    config: _Config = None,
) -> None:
    """Register an endpoint; print its signing secret alone on stdout (shown only this once)."""
    from api.errors import UrlRefused

    kinds = _events(events)
    with closing(_open(data_dir, config)) as hooks:
        try:
            endpoint, secret = hooks.add_endpoint(project, url, kinds)
        except InvalidProject as e:
            raise typer.BadParameter(str(e), param_hint="--project") from None
        except UrlRefused as e:
            raise typer.BadParameter(f"invalid_webhook_url: {e}", param_hint="--url") from None
    typer.echo(f"created {endpoint.id} for project {project} -> {url} ({', '.join(endpoint.events)})", err=True)
    typer.echo(secret)


def list_endpoints(
    project: Annotated[str | None, typer.Option("--project", help="Only this project's endpoints.")] = None,
    data_dir: _DataDir = None,
    config: _Config = None,
) -> None:
    """The endpoints as JSON (never their secrets)."""
    with closing(_open(data_dir, config)) as hooks:
        endpoints = hooks.store.list_endpoints(project)
    typer.echo(json.dumps([e.model_dump(mode="json", exclude={"sealed_secret"}) for e in endpoints], indent=2))


def remove(endpoint_id: Annotated[str, typer.Argument()], data_dir: _DataDir = None, config: _Config = None) -> None:
    """Remove an endpoint and its deliveries."""
    with closing(_open(data_dir, config)) as hooks:
        found = hooks.store.remove_endpoint(endpoint_id)
    if not found:
        typer.echo(f"no endpoint {endpoint_id!r}", err=True)
        raise typer.Exit(1)
    typer.echo(f"removed {endpoint_id}", err=True)


def enable(endpoint_id: Annotated[str, typer.Argument()], data_dir: _DataDir = None, config: _Config = None) -> None:
    """Enable an endpoint the sender disabled (its failure run starts over)."""
    from api.errors import UnknownEndpoint

    with closing(_open(data_dir, config)) as hooks:
        try:
            hooks.enable(endpoint_id)
        except UnknownEndpoint:
            typer.echo(f"no endpoint {endpoint_id!r}", err=True)
            raise typer.Exit(1) from None
    typer.echo(f"enabled {endpoint_id}", err=True)


def deliveries(
    endpoint_id: Annotated[str, typer.Argument()],
    limit: Annotated[int, typer.Option("--limit", min=1, max=1000)] = 20,
    data_dir: _DataDir = None,
    config: _Config = None,
) -> None:
    """The endpoint's delivery log as JSON, newest first."""
    with closing(_open(data_dir, config)) as hooks:
        found = hooks.store.list_deliveries(endpoint_id, limit)
    typer.echo(json.dumps([d.model_dump(mode="json", exclude={"body"}) for d in found], indent=2))


def redeliver(
    delivery_id: Annotated[str, typer.Argument(help="msg_... as `deliveries` shows it.")],
    data_dir: _DataDir = None,
    config: _Config = None,
) -> None:
    """Send a delivery again now, under the same webhook-id."""
    from api.errors import UnknownDelivery

    with closing(_open(data_dir, config)) as hooks:
        try:
            hooks.redeliver(delivery_id)
        except UnknownDelivery:
            typer.echo(f"no delivery {delivery_id!r}", err=True)
            raise typer.Exit(1) from None
    typer.echo(f"queued {delivery_id} for redelivery", err=True)


def secret(
    project: Annotated[str, typer.Option("--project", help="The project whose per-request webhooks it signs.")],
    rotate: Annotated[bool, typer.Option("--rotate", help="Make a new secret (the current one signs too).")] = False,
    grace_s: Annotated[
        int, typer.Option("--grace-s", min=0, max=7 * 86_400, help="With --rotate: how long the current one signs too.")
    ] = 86_400,
    data_dir: _DataDir = None,
    config: _Config = None,
) -> None:
    """Print the secret that signs the project's per-request webhooks (a create's webhook_url), alone on stdout;
    made on first use. --rotate makes a new one; the current one keeps signing beside it for --grace-s."""
    from datetime import timedelta

    with closing(_open(data_dir, config)) as hooks:
        try:
            if rotate:
                stored, value = hooks.rotate_signing_secret(project, timedelta(seconds=grace_s))
            else:
                stored, value = hooks.signing_secret(project)
        except InvalidProject as e:
            raise typer.BadParameter(str(e), param_hint="--project") from None
    if stored.previous_until is not None:
        typer.echo(f"the previous secret also signs until {stored.previous_until.isoformat()}", err=True)
    typer.echo(value)


def keygen() -> None:
    """Print a fresh server key for `webhooks.secret_key` (GENWORKER_WEBHOOKS__SECRET_KEY)."""
    from cryptography.fernet import Fernet

    typer.echo(Fernet.generate_key().decode("ascii"))


def reseal(data_dir: _DataDir = None, config: _Config = None) -> None:
    """Seal every endpoint and project secret under the first key of webhooks.secret_key (after a key rotation)."""
    from api.errors import SealingError

    with closing(_open(data_dir, config)) as hooks:
        try:
            count = hooks.reseal()
        except SealingError as e:
            typer.echo(f"{e}: keep the old key in webhooks.secret_key until every secret is resealed", err=True)
            raise typer.Exit(1) from None
    typer.echo(f"resealed {count} secret(s) under the first key", err=True)


def serve(
    data_dir: _DataDir = None,
    config: _Config = None,
    metrics_port: Annotated[
        int | None, typer.Option("--metrics-port", min=1, max=65535, help="Serve /metrics on this port.")
    ] = None,
    metrics_host: Annotated[str, typer.Option("--metrics-host", help="Bind address of /metrics.")] = "127.0.0.1",
) -> None:
    """Run a sender until SIGTERM/SIGINT: fan queue events out to deliveries and send them."""
    from api.webhooks.sender import Sender
    from foundation.core.logs import configure_logging
    from foundation.queue.factory import open_queue

    settings = _settings(data_dir, config)
    configure_logging(settings.log_level)
    stop = threading.Event()

    def _stop(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    with closing(_open_webhooks(settings)) as hooks, closing(open_queue(settings.queue)) as queue:
        sender = Sender(queue, hooks.store, hooks.sealer, hooks.transport, settings.webhooks, metrics=hooks.metrics)
        if metrics_port is not None:
            from prometheus_client import start_http_server

            start_http_server(metrics_port, addr=metrics_host, registry=hooks.metrics.registry)
        log.info("webhook sender started", extra={"data_dir": settings.data_dir, "backend": settings.queue.backend})
        try:
            sender.run(stop)
        finally:
            sender.close()
    log.info("webhook sender stopped")


# The commands of ``genworker webhooks``, in the order its help lists them.
_COMMANDS: dict[str, Callable[..., None]] = {
    "add": add,
    "list": list_endpoints,
    "remove": remove,
    "enable": enable,
    "deliveries": deliveries,
    "redeliver": redeliver,
    "secret": secret,
    "keygen": keygen,
    "reseal": reseal,
    "serve": serve,
}


def register(app: typer.Typer, group: Callable[..., typer.Typer] = typer.Typer) -> None:
    """Add ``genworker webhooks ...`` to the root command. ``group`` makes the ``webhooks`` group: the root
    passes the class of its own groups, so every group's help reads alike (as ``api.cli.register``)."""
    webhooks = group(help="Signed webhooks: endpoints, delivery logs, redelivery, the sender.", no_args_is_help=True)
    for name, command in _COMMANDS.items():
        webhooks.command(name)(command)
    app.add_typer(webhooks, name="webhooks")
