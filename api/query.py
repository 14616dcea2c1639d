"""Strict query strings: an unknown query parameter is a 400, like an unknown body field.

A typo such as ``?limt=5`` would otherwise be ignored silently and the client would get the default.
"""

from __future__ import annotations

from typing import Any

from fastapi import Depends, Request

from api.errors import ApiError
from foundation.core.errors import ErrorCode

__all__ = ["only_query"]


def only_query(*allowed: str) -> Any:
    """A route dependency refusing query parameters other than ``allowed``."""
    names = frozenset(allowed)

    # async: it does no I/O, so FastAPI runs it on the event loop instead of a threadpool hop.
    async def dependency(request: Request) -> None:
        if not request.scope.get("query_string"):  # no query at all: nothing to parse (every poll)
            return
        for name in request.query_params:
            if name not in names:
                raise ApiError(400, ErrorCode.invalid_parameter, f"unknown query parameter {name!r}", name or None)

    return Depends(dependency)
