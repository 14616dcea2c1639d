"""One ``Settings`` object, built once at start and passed down explicitly.

Sources, highest first: explicit arguments > environment ``GENWORKER_*`` (nested with ``__``, e.g.
``GENWORKER_QUEUE__BACKEND=redis``) > a YAML file (``GENWORKER_CONFIG`` or ``--config``) > defaults.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from contextvars import ContextVar
from enum import Enum
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, SecretStr, model_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    YamlConfigSettingsSource,
)

from foundation.media.config import EncoderSettings
from foundation.queue.config import QueueSettings
from foundation.settings.api import ApiSettings, InputSettings
from foundation.settings.models import ModelRuntimeSettings
from foundation.settings.webhooks import WebhookSettings
from foundation.settings.worker import WorkerSettings
from foundation.stores.config import StoreSettings

__all__ = [
    "ENV_PREFIX",
    "ApiSettings",
    "InputSettings",
    "Settings",
    "WebhookSettings",
    "WorkerSettings",
    "load_settings",
    "settings_env",
    "state_paths",
]

ENV_PREFIX = "GENWORKER_"
_NESTED = "__"

# The YAML file for the Settings being built now (``load_settings(config=...)``), else GENWORKER_CONFIG.
_yaml_file: ContextVar[str | None] = ContextVar("genworker_yaml_file", default=None)


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, env_nested_delimiter=_NESTED, extra="forbid")

    data_dir: str = Field(
        default="var",
        description=(
            "The one state directory: the SQLite queue, `keys.db`, the local store, its `store-secret`, the "
            "tiny models, the compile caches and the encoder's `work/`. A relative `queue.sqlite_path`, "
            "`store.local_root`, `models.tiny_models_dir` or `models.compile_cache_dir` resolves under it; a "
            "relative data_dir resolves against the working directory once, at start, so every process given "
            "the same value shares the same files."
        ),
    )
    catalog_path: str | None = Field(default=None, description="default: configs/models.yaml next to the code")
    log_level: str = Field(
        default="INFO", description="`DEBUG`, `INFO`, `WARNING` or `ERROR`; logs are JSON lines on stderr."
    )
    queue: QueueSettings = Field(default_factory=QueueSettings)
    store: StoreSettings = Field(default_factory=StoreSettings)
    models: ModelRuntimeSettings = Field(default_factory=ModelRuntimeSettings)
    encoder: EncoderSettings = Field(default_factory=EncoderSettings)
    worker: WorkerSettings = Field(default_factory=WorkerSettings)
    api: ApiSettings = Field(default_factory=ApiSettings)
    webhooks: WebhookSettings = Field(default_factory=WebhookSettings)

    @model_validator(mode="after")
    def _state_under_data_dir(self) -> Settings:
        """Make ``data_dir`` absolute and every relative state path a path under it.

        Done once, where the settings are built, so no reader joins paths itself and a child process
        given these values (``settings_env``) needs no working directory of its own.
        """
        root = Path(self.data_dir).expanduser().absolute()
        self.data_dir = str(root)
        self.queue = self.queue.model_copy(update={"sqlite_path": _under(root, self.queue.sqlite_path)})
        self.store = self.store.model_copy(update={"local_root": _under(root, self.store.local_root)})
        models = {"tiny_models_dir": _under(root, self.models.tiny_models_dir)}
        if self.models.compile_cache_dir:  # empty: off
            models["compile_cache_dir"] = _under(root, self.models.compile_cache_dir)
        self.models = self.models.model_copy(update=models)
        return self

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        yaml_path = _yaml_file.get() or os.environ.get("GENWORKER_CONFIG")
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        if yaml_path:
            sources.append(YamlConfigSettingsSource(settings_cls, yaml_file=Path(yaml_path)))
        return tuple(sources)


def _under(root: Path, path: str) -> str:
    candidate = Path(path).expanduser()
    return str(candidate if candidate.is_absolute() else root / candidate)


def state_paths(settings: Settings) -> dict[str, str]:
    """Where these settings write state, for the line each state-writing command prints at start."""
    paths = {"data_dir": settings.data_dir}
    if settings.queue.backend == "sqlite":
        paths["queue"] = settings.queue.sqlite_path
    else:
        paths["queue"] = f"redis ({settings.queue.redis_mode})"
    if settings.store.backend == "local":
        paths["artifacts"] = settings.store.local_root
    else:
        paths["artifacts"] = f"s3 bucket {settings.store.s3_bucket}"
    paths["models"] = settings.models.tiny_models_dir
    return paths


def load_settings(config: str | Path | None = None, **overrides: Any) -> Settings:
    """Build settings from an optional YAML file, the environment and explicit overrides."""
    token = _yaml_file.set(str(config) if config is not None else None)
    try:
        return Settings(**overrides)
    finally:
        _yaml_file.reset(token)


def settings_env(values: Settings | Mapping[str, Any]) -> dict[str, str]:
    """The ``GENWORKER_*`` variables from which a child process builds these values back.

    ``values`` is a whole ``Settings`` or a nested mapping of some fields, e.g.
    ``{"queue": {"backend": "redis"}, "worker": {"preload": ["tiny-wan"]}}`` →
    ``{"GENWORKER_QUEUE__BACKEND": "redis", "GENWORKER_WORKER__PRELOAD": '["tiny-wan"]'}``. Sections
    nest with ``__``; lists and dicts are JSON; secrets are written in clear (the environment is how
    a child receives them). ``None`` is left out: no environment value parses back to None, and every
    optional field defaults to None. A name that is no field raises ``ValueError``: a misspelt
    variable would otherwise be ignored by the child without a word.
    """
    env: dict[str, str] = {}
    _flatten(Settings, values, ENV_PREFIX, env)
    return env


def _flatten(model: type[BaseModel], values: BaseModel | Mapping[str, Any], prefix: str, env: dict[str, str]) -> None:
    items = (
        dict(values) if isinstance(values, Mapping) else {name: getattr(values, name) for name in model.model_fields}
    )
    for name, value in items.items():
        field = model.model_fields.get(name)
        if field is None:
            raise ValueError(f"{prefix}{name.upper()}: {model.__name__} has no field {name!r}")
        section = field.annotation
        if isinstance(section, type) and issubclass(section, BaseModel) and isinstance(value, BaseModel | Mapping):
            _flatten(section, value, f"{prefix}{name.upper()}{_NESTED}", env)
        elif value is not None:
            env[f"{prefix}{name.upper()}"] = _env_value(value)


def _env_value(value: Any) -> str:
    """One value as the environment source parses it back: JSON for containers, plain text else."""
    if isinstance(value, SecretStr):
        return value.get_secret_value()
    if isinstance(value, Enum):
        return str(value.value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | tuple | dict):
        return json.dumps(value, default=str)
    return str(value)
