"""Artifact store settings (the ``store`` section of ``Settings``; env ``GENWORKER_STORE__*``)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field, SecretStr

__all__ = ["StoreSettings"]


class StoreSettings(BaseModel):
    backend: Literal["local", "s3"] = "local"
    # Lifetime of every signed download URL (re-signed on each GET of a generation).
    url_ttl_s: int = Field(default=900, ge=1, le=7 * 24 * 3600)
    # Local directory store: files under local_root (a relative one under data_dir), URLs signed with
    # HMAC and served by the API.
    local_root: str = "artifacts"
    signing_secret: SecretStr | None = None
    public_base_url: str = "http://127.0.0.1:8000"
    # S3-compatible store.
    s3_endpoint_url: str | None = None
    s3_bucket: str = "genworker"
    s3_region: str = "us-east-1"
    s3_access_key_id: SecretStr | None = None
    s3_secret_access_key: SecretStr | None = None
    # Presigned URLs are signed for this host when clients reach the store by another address than
    # the workers do (e.g. an internal endpoint vs a public one); None: s3_endpoint_url.
    s3_public_endpoint_url: str | None = None
    # botocore "standard" retries (exponential backoff with jitter) on connection errors, 5xx, throttling.
    s3_max_attempts: int = Field(default=5, ge=1, le=20)
    s3_connect_timeout_s: float = Field(default=5.0, gt=0)
    s3_read_timeout_s: float = Field(default=60.0, gt=0)
