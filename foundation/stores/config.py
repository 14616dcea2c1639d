"""Artifact store settings (the ``store`` section of ``Settings``; env ``GENWORKER_STORE__*``)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field, SecretStr

__all__ = ["StoreSettings"]


class StoreSettings(BaseModel):
    backend: Literal["local", "s3"] = Field(
        default="local",
        description="`local`: a directory the API serves (HMAC-signed URLs); `s3`: an S3-compatible store.",
    )
    url_ttl_s: int = Field(
        default=900,
        ge=1,
        le=7 * 24 * 3600,
        description="Lifetime of every signed download URL (re-signed on each GET of a generation).",
    )
    local_root: str = Field(
        default="artifacts",
        description=(
            "Local directory store: files under local_root (a relative one under data_dir), URLs signed with "
            "HMAC and served by the API."
        ),
    )
    signing_secret: SecretStr | None = Field(
        default=None, description="Local store: HMAC key of signed URLs (None: generated once under data_dir)."
    )
    public_base_url: str = Field(
        default="http://127.0.0.1:8000",
        description="Local store: the API's address as clients reach it (signed URLs use it).",
    )
    s3_endpoint_url: str | None = Field(default=None, description="S3-compatible store.")
    s3_bucket: str = Field(default="genworker", description="Bucket of the artifacts (created, private, when missing).")
    s3_region: str = Field(default="us-east-1", description="Region used for SigV4 signing.")
    s3_access_key_id: SecretStr | None = Field(
        default=None, description="S3 credentials (None: the default AWS credential chain)."
    )
    s3_secret_access_key: SecretStr | None = Field(
        default=None, description="S3 credentials (None: the default AWS credential chain)."
    )
    s3_public_endpoint_url: str | None = Field(
        default=None,
        description=(
            "Presigned URLs are signed for this host when clients reach the store by another address than "
            "the workers do (e.g. an internal endpoint vs a public one); None: s3_endpoint_url."
        ),
    )
    s3_max_attempts: int = Field(
        default=5,
        ge=1,
        le=20,
        description=(
            'botocore "standard" retries (exponential backoff with jitter) on connection errors, 5xx, throttling.'
        ),
    )
    s3_connect_timeout_s: float = Field(default=5.0, gt=0, description="S3 TCP connect timeout.")
    s3_read_timeout_s: float = Field(default=60.0, gt=0, description="S3 socket read timeout.")
