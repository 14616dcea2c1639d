"""One ``Settings`` object, built once at start and passed down explicitly.

Sources, highest first: explicit arguments > environment ``GENWORKER_*`` (nested with ``__``, e.g.
``GENWORKER_QUEUE__BACKEND=redis``) > a YAML file (``GENWORKER_CONFIG`` or ``--config``) > defaults.
"""

from __future__ import annotations

import os
from contextvars import ContextVar
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    YamlConfigSettingsSource,
)

from pipelines.config import ModelRuntimeSettings
from worker.queue.config import QueueSettings
from worker.stores.config import StoreSettings

__all__ = ["ApiSettings", "Settings", "WorkerSettings", "load_settings"]

# The YAML file for the Settings being built now (``load_settings(config=...)``), else GENWORKER_CONFIG.
_yaml_file: ContextVar[str | None] = ContextVar("genworker_yaml_file", default=None)


class WorkerSettings(BaseModel):
    hosted_models: list[str] = Field(default_factory=lambda: ["tiny-wan", "tiny-ltx2"])
    preload: list[str] = Field(default_factory=list)
    metrics_port: int | None = None
    heartbeat_s: float = Field(default=5.0, gt=0)
    drain_grace_s: float = Field(default=60.0, ge=0)


class ApiSettings(BaseModel):
    host: str = "127.0.0.1"
    port: int = 8000
    max_body_bytes: int = 1_000_000


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="GENWORKER_", env_nested_delimiter="__", extra="forbid")

    data_dir: str = "var"
    catalog_path: str | None = None  # default: configs/models.yaml next to the code
    log_level: str = "INFO"
    queue: QueueSettings = Field(default_factory=QueueSettings)
    store: StoreSettings = Field(default_factory=StoreSettings)
    models: ModelRuntimeSettings = Field(default_factory=ModelRuntimeSettings)
    worker: WorkerSettings = Field(default_factory=WorkerSettings)
    api: ApiSettings = Field(default_factory=ApiSettings)

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


def load_settings(config: str | Path | None = None, **overrides: Any) -> Settings:
    """Build settings from an optional YAML file, the environment and explicit overrides."""
    token = _yaml_file.set(str(config) if config is not None else None)
    try:
        return Settings(**overrides)
    finally:
        _yaml_file.reset(token)
