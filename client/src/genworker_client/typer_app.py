"""A ``typer.Typer`` whose help shows flags bare: ``--wait``, not ``--wait <bool>``.

Typer's rich help prints a type placeholder for every option, flags included, although a flag takes no
value: ``--audio / --no-audio <bool>`` reads as if it wanted ``--audio true``. An empty metavar on each flag
makes typer print nothing in that column. Every ``genworker`` command tree (the server's and this client's)
is built from ``App``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import typer
from typer.core import TyperCommand, TyperGroup, TyperOption

__all__ = ["App", "FlagCommand", "FlagGroup"]

_F = TypeVar("_F", bound=Callable[..., Any])


# Typer vendors its own click, whose types are private to it: parameters and contexts are typed ``Any`` here.
def _bare_flags(params: list[Any]) -> list[Any]:
    for param in params:
        if isinstance(param, TyperOption) and param.is_flag and param.metavar is None:
            param.metavar = ""
    return params


class FlagCommand(TyperCommand):
    def get_params(self, ctx: Any) -> list[Any]:
        return _bare_flags(super().get_params(ctx))


class FlagGroup(TyperGroup):
    def get_params(self, ctx: Any) -> list[Any]:
        return _bare_flags(super().get_params(ctx))


class App(typer.Typer):
    """``typer.Typer`` with ``FlagGroup``/``FlagCommand`` as the default classes of its group and commands."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("cls", FlagGroup)
        super().__init__(**kwargs)

    def command(
        self, name: str | None = None, *, cls: type[TyperCommand] | None = None, **kwargs: Any
    ) -> Callable[[_F], _F]:
        return super().command(name, cls=cls or FlagCommand, **kwargs)
