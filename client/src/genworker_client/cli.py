"""``genworker client ...``: the client library from a shell. JSON on stdout, progress on stderr.

Base URL and key come from ``GENWORKER_BASE_URL`` and ``GENWORKER_API_KEY``; there is deliberately no
option for the key, so it never lands in shell history or a process list.

Exit codes: 0 success; 1 an API or transport error, or a waited generation that ended ``failed`` or
``canceled``; 3 ``--wait`` timed out (the generation may still finish: ``genworker client wait ID``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import httpx
import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from genworker_client.errors import ApiError, ClientError, WaitTimeout
from genworker_client.events import StreamEvent
from genworker_client.models import Generation
from genworker_client.sync import Client
from genworker_client.typer_app import App

__all__ = ["app"]

app = App(
    name="client",
    help="Create, wait for, download and cancel generations (GENWORKER_BASE_URL, GENWORKER_API_KEY).",
    no_args_is_help=True,
)

_stderr = Console(stderr=True)
BaseUrl = Annotated[
    str | None, typer.Option("--base-url", envvar="GENWORKER_BASE_URL", help="Service base URL (host + /v1).")
]
Timeout = Annotated[float, typer.Option("--timeout", min=0.0, help="Seconds to wait for a terminal status.")]
GenerationId = Annotated[str, typer.Argument(metavar="ID", help="Generation id.")]


def _emit(data: Any) -> None:
    typer.echo(json.dumps(data, indent=2, ensure_ascii=False))


def _record(generation: Generation) -> dict[str, Any]:
    return generation.model_dump(mode="json", exclude_none=True)


@contextmanager
def _client(base_url: str | None, ledger: Path | None = None) -> Iterator[Client]:
    """A client, with every ``ClientError`` turned into a JSON error on stderr and a non-zero exit."""
    try:
        with Client(base_url, ledger=ledger) as client:
            yield client
    except WaitTimeout as e:
        typer.echo(str(e), err=True)
        raise typer.Exit(3) from e
    except ApiError as e:
        error = {"status": e.status, "code": e.code, "message": e.message, "param": e.param}
        typer.echo(json.dumps({"error": error}), err=True)
        raise typer.Exit(1) from e
    except (ClientError, ValueError, httpx.HTTPError) as e:  # a stable code, never a Python class name
        typer.echo(json.dumps({"error": {"code": _code(e), "message": str(e)}}), err=True)
        raise typer.Exit(1) from e


def _code(error: Exception) -> str:
    if isinstance(error, ClientError):
        return error.code
    if isinstance(error, ValueError | httpx.UnsupportedProtocol | httpx.InvalidURL):
        return "invalid_argument"  # a bad --base-url, id or option value
    return "transport_failed"  # an httpx error the client does not retry


def _wait_with_bar(
    client: Client, generation: Generation, timeout_s: float, on_event: Callable[[StreamEvent], None] | None = None
) -> Generation:
    """``client.wait`` with a rich progress bar on stderr fed by each polled record."""
    columns = (TextColumn("{task.description}"), BarColumn(), TextColumn("{task.percentage:>3.0f}%"))
    with Progress(*columns, TimeElapsedColumn(), console=_stderr, transient=False) as bar:
        task = bar.add_task(f"{generation.id} {generation.status}", total=1.0)

        def show(g: Generation) -> None:
            done = 1.0 if g.succeeded else (g.progress or 0.0)
            bar.update(task, completed=done, description=f"{g.id} {g.status}" + (f" · {g.stage}" if g.stage else ""))

        def live(e: StreamEvent) -> None:
            done = 1.0 if e.status == "succeeded" else (e.progress or 0.0)
            bar.update(
                task, completed=done, description=f"{e.generation_id} {e.status}" + (f" · {e.stage}" if e.stage else "")
            )
            if on_event is not None:
                on_event(e)

        final = client.wait(generation, timeout_s=timeout_s, on_progress=show, on_event=live)
    return final


class _StageLines:
    """``watch``'s plain record on stdout: one line when the status or the stage changes, not per tick."""

    def __init__(self) -> None:
        self._last: tuple[str, str | None, int] | None = None

    def __call__(self, e: StreamEvent) -> None:
        key = (e.status, e.stage, e.attempt)
        if key == self._last:
            return
        self._last = key
        stage = f" {e.stage}" if e.stage else ""
        typer.echo(f"{e.at}  {e.status}{stage}" + (f" (attempt {e.attempt})" if e.attempt > 1 else ""))


def _exit_unless_succeeded(generation: Generation) -> None:
    if generation.terminal and not generation.succeeded:
        raise typer.Exit(1)


@app.command()
def create(
    *,
    model: Annotated[str, typer.Option(help="Model id from `genworker client models`.")],
    prompt: Annotated[str, typer.Option(help="Text prompt.")],
    image: Annotated[
        str | None,
        typer.Option(help="Input image (image_to_video): a local JPEG/PNG/WebP file, sent inline, or an https URL."),
    ] = None,
    mode: Annotated[str | None, typer.Option(help="Default: image_to_video with --image, else text_to_video.")] = None,
    variant: Annotated[str, typer.Option()] = "standard",
    resolution: Annotated[str | None, typer.Option(help="e.g. 144p, 480p (default: the model's).")] = None,
    ratio: Annotated[str | None, typer.Option(help="e.g. 16:9, 9:16, 1:1.")] = None,
    duration: Annotated[int | None, typer.Option(help="Length in seconds.")] = None,
    audio: Annotated[bool | None, typer.Option("--audio/--no-audio")] = None,
    prompt_extend: Annotated[bool | None, typer.Option("--prompt-extend/--no-prompt-extend")] = None,
    seed: Annotated[int | None, typer.Option()] = None,
    negative_prompt: Annotated[str | None, typer.Option(help="What to keep out (default: the model's).")] = None,
    idempotency_key: Annotated[str | None, typer.Option(help="Reuse a key to retry a create safely.")] = None,
    name: Annotated[str | None, typer.Option(help="Logical name in --ledger: a rerun reuses its key.")] = None,
    ledger: Annotated[Path | None, typer.Option(help="JSON key ledger file (with --name).")] = None,
    wait: Annotated[
        bool, typer.Option("--wait", help="Wait until it ends (its event stream), with a progress bar.")
    ] = False,
    download: Annotated[Path | None, typer.Option(help="Directory for the artifacts (implies --wait).")] = None,
    timeout: Timeout = 1800.0,
    base_url: BaseUrl = None,
) -> None:
    """Create a generation. Prints {"idempotency_key", "replayed", "generation", "files"}."""

    def announce(g: Generation) -> None:  # the id first, before any waiting, so it is never lost
        typer.echo(f"created {g.id} (Idempotency-Key {g.idempotency_key})", err=True)

    with _client(base_url, ledger) as client:
        generation = client.create(
            model, prompt, mode=mode, variant=variant, resolution=resolution, duration_seconds=duration, ratio=ratio,
            audio=audio, prompt_extend=prompt_extend, seed=seed, negative_prompt=negative_prompt, image=image,
            idempotency_key=idempotency_key, name=name,
            on_created=announce,
        )  # fmt: skip
        key, replayed = generation.idempotency_key, generation.replayed
        files: list[str] = []
        if wait or download is not None:
            generation = _wait_with_bar(client, generation, timeout)
            if download is not None and generation.succeeded:
                files = [str(p) for p in client.download(generation, download)]
        _emit({"idempotency_key": key, "replayed": replayed, "generation": _record(generation), "files": files})
        _exit_unless_succeeded(generation)


@app.command()
def get(generation_id: GenerationId, base_url: BaseUrl = None) -> None:
    """Print a generation record (fresh download URLs when succeeded)."""
    with _client(base_url) as client:
        _emit(_record(client.get(generation_id)))


@app.command("wait")
def wait_cmd(generation_id: GenerationId, timeout: Timeout = 1800.0, base_url: BaseUrl = None) -> None:
    """Wait until a generation ends, following its event stream (polling where the server has none), with a
    progress bar on stderr; print the final record."""
    with _client(base_url) as client:
        generation = _wait_with_bar(client, client.get(generation_id), timeout)
        _emit(_record(generation))
        _exit_unless_succeeded(generation)


@app.command("watch")
def watch_cmd(generation_id: GenerationId, timeout: Timeout = 1800.0, base_url: BaseUrl = None) -> None:
    """Follow a generation live: a progress bar on stderr, one line per status or stage change on
    stdout, then the final status; exits 0 when it succeeded, 1 when it failed or was canceled. Uses
    the server's event stream (GET /v1/generations/{id}/events), or polls where it has none."""
    with _client(base_url) as client:
        generation = client.get(generation_id)
        typer.echo(f"{generation.id}  {generation.model}  {generation.status}")
        if not generation.terminal:
            generation = _wait_with_bar(client, generation, timeout, on_event=_StageLines())
        error = f" ({generation.error.code}: {generation.error.message})" if generation.error else ""
        typer.echo(f"{generation.id}  {generation.status}{error}")
        _exit_unless_succeeded(generation)


@app.command("download")
def download_cmd(
    generation_id: GenerationId,
    directory: Annotated[Path, typer.Argument(metavar="DIR", help="Where to write the files.")],
    base_url: BaseUrl = None,
) -> None:
    """Download a succeeded generation's artifacts into DIR (verified); prints {"files": [...]}."""
    with _client(base_url) as client:
        _emit({"files": [str(p) for p in client.download(generation_id, directory)]})


@app.command()
def cancel(generation_id: GenerationId, base_url: BaseUrl = None) -> None:
    """Request cancellation and print the record."""
    with _client(base_url) as client:
        _emit(_record(client.cancel(generation_id)))


@app.command("list")
def list_cmd(
    limit: Annotated[int | None, typer.Option(min=1)] = None,
    cursor: Annotated[str | None, typer.Option(help="next_cursor from the previous page.")] = None,
    base_url: BaseUrl = None,
) -> None:
    """Print one page of this project's generations, newest first."""
    with _client(base_url) as client:
        page = client.list(limit=limit, cursor=cursor)
        _emit({"data": [_record(g) for g in page.data], "next_cursor": page.next_cursor})


@app.command()
def models(base_url: BaseUrl = None) -> None:
    """Print the model catalog (no key needed)."""
    with _client(base_url) as client:
        _emit([m.model_dump(mode="json") for m in client.models()])
