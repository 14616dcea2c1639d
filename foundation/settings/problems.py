"""Why settings could not be built, one sentence per bad field, for a person at a terminal.

pydantic-settings reports a ``GENWORKER_*`` value that is not JSON where JSON is needed (a list, a table) as a
``SettingsError`` naming only the top-level section ("error parsing value for field "webhooks""), and pydantic a
bad value as a ``ValidationError`` whose message follows a page of traceback. ``settings_problems`` turns either
into lines such as ``bad setting webhooks.allowed_hosts (GENWORKER_WEBHOOKS__ALLOWED_HOSTS): ...``.
"""

from __future__ import annotations

import json
import os
import types
import typing
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ValidationError
from pydantic_settings import SettingsError

__all__ = ["settings_problems"]

_PREFIX = "GENWORKER_"
_NESTED = "__"
_CONTAINERS = (list, dict, set, frozenset, tuple)


def settings_problems(error: BaseException, model: type[BaseModel], env: Mapping[str, str] | None = None) -> list[str]:
    """One line per bad field of ``model`` (the ``Settings`` class) in ``error``; [] when ``error`` is of another
    kind. ``env``: the environment the settings were read from (default ``os.environ``)."""
    env = os.environ if env is None else env
    if isinstance(error, ValidationError) and error.title == model.__name__:
        return [_validation_line(item, env) for item in error.errors()]
    if isinstance(error, SettingsError):
        return _not_json_lines(model, env) or [str(error)]
    return []


def _validation_line(item: Any, env: Mapping[str, str]) -> str:
    path = ".".join(str(part) for part in item["loc"])
    message = str(item["msg"]).removeprefix("Value error, ").removeprefix(f"{path}: ")
    if item["type"] != "value_error" and isinstance(item.get("input"), str | int | float):
        message = f"{message}, not {item['input']!r}"
    variable = _variable(item["loc"], env)
    where = f" ({variable})" if variable else ""
    return f"bad setting {path}{where}: {message}"


def _variable(loc: tuple[Any, ...], env: Mapping[str, str]) -> str | None:
    """The ``GENWORKER_*`` variable that set the field at ``loc`` (or a section above it), if one did."""
    parts = [str(part).upper() for part in loc]
    for end in range(len(parts), 0, -1):
        name = _PREFIX + _NESTED.join(parts[:end])
        if name in env:
            return name
    return None


def _not_json_lines(model: type[BaseModel], env: Mapping[str, str]) -> list[str]:
    """The variables of list or table fields whose value does not parse as JSON (what a SettingsError means)."""
    lines = []
    for name, value in sorted(env.items()):
        if not name.startswith(_PREFIX):
            continue
        path = name.removeprefix(_PREFIX).lower().split(_NESTED)
        annotation = _annotation(model, path)
        if annotation is None or not _is_complex(annotation):
            continue
        try:
            json.loads(value)
        except ValueError:
            example = '["a", "b"]' if _is_list(annotation) else '{"key": "value"}'
            lines.append(
                f"bad setting {'.'.join(path)} ({name}): {value!r} is not JSON; write it as JSON, e.g. '{example}'"
            )
    return lines


def _annotation(model: type[BaseModel], path: list[str]) -> Any:
    annotation: Any = model
    for part in path:
        fields = getattr(_model_of(annotation), "model_fields", None)
        if fields is None or part not in fields:
            return None
        annotation = fields[part].annotation
    return annotation


def _model_of(annotation: Any) -> Any:
    """``annotation`` itself, or the model inside an ``X | None``."""
    for arg in _alternatives(annotation):
        if isinstance(arg, type) and issubclass(arg, BaseModel):
            return arg
    return annotation


def _is_complex(annotation: Any) -> bool:
    """Whether pydantic-settings reads the field's variable as JSON: containers and models (also in ``| None``)."""
    if any(_container(arg) is not None for arg in _alternatives(annotation)):
        return True
    return any(isinstance(arg, type) and issubclass(arg, BaseModel) for arg in _alternatives(annotation))


def _is_list(annotation: Any) -> bool:
    return any(_container(arg) not in (None, dict) for arg in _alternatives(annotation))


def _container(annotation: Any) -> type | None:
    """``list`` for ``list[str]`` (or a bare ``list``), and so on; None for anything else."""
    kind = typing.get_origin(annotation) or annotation
    return kind if kind in _CONTAINERS else None


def _alternatives(annotation: Any) -> tuple[Any, ...]:
    """The members of ``X | Y`` (or ``Optional[X]``), else ``annotation`` alone."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return typing.get_args(annotation)
    return (annotation,)
