"""Every ``genworker`` help page shows flags bare (``--wait``, not ``--wait <bool>``) and still types options
that take a value."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import typer
from typer.main import get_command
from typer.testing import CliRunner

from genworker.cli import app


def _paths(command: object, prefix: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    yield prefix
    for name, sub in sorted(getattr(command, "commands", {}).items()):
        yield from _paths(sub, (*prefix, name))


PATHS = list(_paths(get_command(app)))


def test_the_walk_reaches_every_tree() -> None:
    assert {("generate",), ("client", "create"), ("keys", "create"), ("fleet", "up")} <= set(PATHS)


@pytest.mark.parametrize("path", PATHS, ids=lambda p: " ".join(p) or "genworker")
def test_help_has_no_bool_placeholder(path: tuple[str, ...]) -> None:
    result = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": "160"}, terminal_width=160)
    assert result.exit_code == 0, result.output
    assert "--help" in result.output
    assert "<bool>" not in result.output


def test_value_options_keep_their_type() -> None:
    result = CliRunner().invoke(app, ["generate", "--help"], env={"COLUMNS": "160"}, terminal_width=160)
    assert "<str>" in result.output and "<int>" in result.output
    line = next(ln for ln in result.output.splitlines() if "--audio" in ln)
    assert "--no-audio" in line and "<" not in line


def test_a_plain_typer_app_would_show_the_placeholder() -> None:
    """The control: without ``App`` typer prints ``<bool>``, so the assertions above can fail."""
    plain = typer.Typer()

    @plain.command()
    def run(wait: bool = False) -> None:
        """Run."""

    result = CliRunner().invoke(plain, ["--help"], env={"COLUMNS": "160"}, terminal_width=160)
    assert "<bool>" in result.output
