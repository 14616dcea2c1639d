"""Strict query strings: an unknown query parameter is a 400, like an unknown body field.

A typo such as ``?limt=5`` would otherwise be ignored silently and the client would get the default.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Depends, Query, Request
from fastapi.exceptions import RequestValidationError

from api.context import context
from api.errors import ApiError
from foundation.core.errors import ErrorCode

__all__ = ["only_query", "page_limit"]


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


async def page_limit(request: Request, limit: Annotated[int, Query(ge=1)] = 20) -> int:
    """A list route's ``limit``: at most ``api.list_max_limit``, a setting, so checked here rather than in
    the parameter's declaration (a route declared once for every app), with the 400 FastAPI gives for a
    bound it checks itself."""
    most = context(request).settings.api.list_max_limit
    if limit > most:
        error = {
            "type": "less_than_equal",
            "loc": ("query", "limit"),
            "msg": f"Input should be less than or equal to {most}",
            "input": request.query_params.get("limit"),
            "ctx": {"le": most},
        }
        raise RequestValidationError([error])
    return limit
