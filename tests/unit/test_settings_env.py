"""``settings_env``: Settings → ``GENWORKER_*`` variables that the environment source parses back."""

from __future__ import annotations

import types
from pathlib import Path
from typing import Any, Union, get_args, get_origin

import pytest
from pydantic import BaseModel

from foundation.settings import Settings, settings_env


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """No inherited GENWORKER_* variable (nor a YAML file) may leak into the settings under test."""
    import os

    for name in list(os.environ):
        if name.startswith("GENWORKER_"):
            monkeypatch.delenv(name)
    return monkeypatch


def _non_trivial() -> Settings:
    # model_validate, not Settings(...): the original must not read the environment itself.
    return Settings.model_validate(
        {
            "data_dir": "/srv/gen data",
            "catalog_path": "/etc/genworker/models.yaml",
            "log_level": "DEBUG",
            "queue": {
                "backend": "redis",
                "redis_url": "rediss://user:p%40ss@redis.internal:6380/2",
                "redis_mode": "sentinel",
                "sentinel_addresses": ["10.0.0.1:26379", "10.0.0.2:26379"],
                "sentinel_password": "s3ntinel secret",
                "tls_check_hostname": False,
                "lease_ttl_s": 2.5,
                "max_attempts": 7,
                "retry_backoff_s": 0.2,
            },
            "store": {
                "backend": "s3",
                "s3_endpoint_url": "http://127.0.0.1:8333",
                "s3_access_key_id": "AKIA",
                "s3_secret_access_key": "a=b;c d\"e'f",
                "signing_secret": "0123456789abcdef0123",
                "url_ttl_s": 60,
            },
            "models": {"device": "cpu", "dtype": "bfloat16", "cache_budget_gb": 12.5, "weights_dir": "/weights"},
            "encoder": {"codec": "libx264", "preset": "ultrafast", "threads": 1, "poster": "first"},
            "worker": {
                "worker_id": "gpu-7",
                "hosted_models": ["tiny-wan", "wan-2.1-t2v-14b"],
                "preload": [],
                "metrics_port": 0,
                "overlap": False,
                "heartbeat_s": 1,
            },
            "api": {"host": "0.0.0.0", "port": 9000, "keys_backend": "redis", "docs": False},
        }
    )


def test_a_whole_settings_round_trips_through_the_environment(clean_env: pytest.MonkeyPatch) -> None:
    original = _non_trivial()
    env = settings_env(original)
    for name, value in env.items():
        clean_env.setenv(name, value)
    assert Settings() == original
    assert env["GENWORKER_QUEUE__SENTINEL_ADDRESSES"] == '["10.0.0.1:26379", "10.0.0.2:26379"]'
    assert env["GENWORKER_WORKER__OVERLAP"] == "false"
    assert env["GENWORKER_STORE__S3_SECRET_ACCESS_KEY"] == "a=b;c d\"e'f"  # in clear, for the child


def test_a_partial_mapping_names_only_what_it_holds(clean_env: pytest.MonkeyPatch) -> None:
    env = settings_env({"data_dir": "/d", "queue": {"backend": "redis"}, "worker": {"preload": ["tiny-wan"]}})
    assert env == {
        "GENWORKER_DATA_DIR": "/d",
        "GENWORKER_QUEUE__BACKEND": "redis",
        "GENWORKER_WORKER__PRELOAD": '["tiny-wan"]',
    }
    for name, value in env.items():
        clean_env.setenv(name, value)
    built = Settings()
    assert (built.data_dir, built.queue.backend, built.worker.preload) == ("/d", "redis", ["tiny-wan"])
    assert built.worker.hosted_models == Settings.model_validate({}).worker.hosted_models


def test_a_section_given_as_a_model_is_flattened_like_a_mapping() -> None:
    store = _non_trivial().store
    assert settings_env({"store": store}) == {k: v for k, v in settings_env(_non_trivial()).items() if "_STORE__" in k}


@pytest.mark.parametrize("partial", [{"qeue": {"backend": "redis"}}, {"queue": {"backend": "redis", "lease": 3}}])
def test_a_misspelt_name_is_refused(partial: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="has no field"):
        settings_env(partial)


def _optional_fields(model: type[BaseModel], prefix: str = "") -> list[tuple[str, Any]]:
    found = []
    for name, field in model.model_fields.items():
        ann = field.annotation
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            found += _optional_fields(ann, f"{prefix}{name}.")
        elif get_origin(ann) in (Union, types.UnionType) and type(None) in get_args(ann):
            found.append((f"{prefix}{name}", field.get_default(call_default_factory=True)))
    return found


def test_every_optional_field_defaults_to_none() -> None:
    """``settings_env`` leaves None out, which reads back right only while None is the default."""
    optional = _optional_fields(Settings)
    assert optional, "the walk found no optional field"
    assert [name for name, default in optional if default is not None] == []


def test_the_embedded_worker_builds_the_apis_queue_store_and_models(
    clean_env: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from genworker.embedded import EmbeddedPaths, embedded_settings, worker_env

    api = embedded_settings(EmbeddedPaths(tmp_path), host="127.0.0.1", port=8123, models_dir=tmp_path / "m")
    for name, value in worker_env(api).items():
        if name.startswith("GENWORKER_"):
            clean_env.setenv(name, value)
    worker = Settings()
    assert (worker.data_dir, worker.queue, worker.models) == (api.data_dir, api.queue, api.models)
    assert worker.store == api.store  # the signing secret is not passed: both read <data_dir>/store-secret
    assert worker.worker.drain_grace_s == 10
