"""The S3-compatible store (AWS S3, SeaweedFS, MinIO, ...) through boto3.

- SigV4 and path-style addressing always: boto3 may otherwise presign with SigV2, and virtual-host
  style does not resolve for an IP endpoint.
- Uploads use the transfer manager: multipart above 8 MiB in 8 MiB parts, two at a time, so memory
  stays at a few parts whatever the file size. Every request carries a SHA-256 checksum the server
  verifies (per part for multipart); the whole file's SHA-256 goes into the object's metadata and a
  ``HEAD`` afterwards checks size and digest.
- Connection errors, 5xx and throttling are retried by botocore (``standard`` mode: exponential
  backoff with jitter); what still fails is ``TransientError(upload_failed)``, and
  ``BackendUnavailable(code=upload_failed)`` when the store did not answer at all. Refusals (bad
  credentials, missing bucket, access denied) are ``JobError(upload_failed)``: retrying cannot help.
  Every method that talks to the store translates botocore's errors in ``_translated``; callers never
  import botocore to decide what happened.
- Downloads are presigned GET URLs. ``s3_public_endpoint_url`` signs them for the host clients reach
  when the workers talk to the store on an internal address.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import boto3
from boto3.s3.transfer import TransferConfig
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError, HTTPClientError
from botocore.exceptions import ConnectionError as BotoConnectionError

from foundation.core.errors import BackendUnavailable, ErrorCode, JobError, TransientError
from foundation.stores.base import ListedObject, SignedUrl, StoredObject
from foundation.stores.config import StoreSettings

__all__ = ["S3Store"]

_PART_BYTES = 8 * 1024 * 1024
_HASH_BLOCK = 1 << 20
# Error codes that mean "try again later" rather than "you are not allowed / it is not there".
_TRANSIENT_CODES = frozenset(
    {
        "InternalError",
        "ServiceUnavailable",
        "SlowDown",
        "Throttling",
        "ThrottlingException",
        "RequestTimeout",
        "RequestTimeTooSkewed",
        "BadDigest",  # the bytes changed in transit
        "XAmzContentSHA256Mismatch",
        "InvalidDigest",
    }
)


def _secret(value: Any) -> str | None:
    return None if value is None else str(value.get_secret_value())


class S3Store:
    def __init__(self, settings: StoreSettings) -> None:
        self.bucket = settings.s3_bucket
        self.ttl_s = settings.url_ttl_s
        self._client = self._make_client(settings, settings.s3_endpoint_url)
        public = settings.s3_public_endpoint_url
        self._signer = self._client if public is None else self._make_client(settings, public)
        self._transfer = TransferConfig(
            multipart_threshold=_PART_BYTES,
            multipart_chunksize=_PART_BYTES,
            max_concurrency=2,
            use_threads=True,
        )

    @staticmethod
    def _make_client(settings: StoreSettings, endpoint_url: str | None) -> Any:
        config = Config(
            signature_version="s3v4",
            s3={"addressing_style": "path"},
            retries={"mode": "standard", "max_attempts": settings.s3_max_attempts},
            connect_timeout=settings.s3_connect_timeout_s,
            read_timeout=settings.s3_read_timeout_s,
        )
        return boto3.client(
            "s3",
            endpoint_url=endpoint_url,
            region_name=settings.s3_region,
            aws_access_key_id=_secret(settings.s3_access_key_id),
            aws_secret_access_key=_secret(settings.s3_secret_access_key),
            config=config,
        )

    def ensure_bucket(self) -> None:
        """Create the bucket (private: no ACL, no policy) unless it exists and is ours."""
        with _translated(f"bucket {self.bucket}"):
            if self._bucket_exists():
                return
            try:
                self._client.create_bucket(Bucket=self.bucket)
            except ClientError as e:
                if _code(e) not in ("BucketAlreadyOwnedByYou", "BucketAlreadyExists"):
                    raise

    def _bucket_exists(self) -> bool:
        try:
            self._client.head_bucket(Bucket=self.bucket)
        except ClientError as e:
            if _status(e) == 404:
                return False
            raise
        return True

    def put_file(self, key: str, path: Path, *, content_type: str, sha256: str | None = None) -> StoredObject:
        digest, size = _sha256_file(path)
        if sha256 is not None and sha256 != digest:
            # The file is not what the encoder wrote; a retry re-encodes it.
            raise TransientError(ErrorCode.upload_failed, f"{path.name} changed on disk: sha256 {digest} != {sha256}")
        extra = {"ContentType": content_type, "Metadata": {"sha256": digest}, "ChecksumAlgorithm": "SHA256"}
        with _translated(f"upload of {key}"):
            self._client.upload_file(str(path), self.bucket, key, ExtraArgs=extra, Config=self._transfer)
            head = self._client.head_object(Bucket=self.bucket, Key=key, ChecksumMode="ENABLED")
        _check_head(key, head, size, digest)
        return StoredObject(key=key, bytes=size, sha256=digest, content_type=content_type)

    def sign_url(self, key: str, *, ttl_s: int | None = None) -> SignedUrl:
        # Not translated: presigning is computed here without talking to the store, so what botocore
        # raises (no credentials configured) is a misconfiguration, not a store outage to retry.
        ttl = self.ttl_s if ttl_s is None else ttl_s
        signed_at = datetime.now(UTC)
        url = self._signer.generate_presigned_url(
            "get_object", Params={"Bucket": self.bucket, "Key": key}, ExpiresIn=ttl
        )
        return SignedUrl(url=str(url), expires_at=signed_at + timedelta(seconds=ttl))

    def exists(self, key: str) -> bool:
        with _translated(f"head of {key}"):
            try:
                self._client.head_object(Bucket=self.bucket, Key=key)
            except ClientError as e:
                if _status(e) == 404:
                    return False
                raise
        return True

    def read_bytes(self, key: str, *, max_bytes: int) -> bytes | None:
        with _translated(f"read of {key}"):
            try:
                response = self._client.get_object(Bucket=self.bucket, Key=key, Range=f"bytes=0-{max_bytes - 1}")
            except ClientError as e:
                if _status(e) == 404 or _code(e) == "NoSuchKey":
                    return None
                raise
            body = response["Body"]
            try:
                return bytes(body.read(max_bytes))
            finally:
                body.close()

    def delete(self, key: str) -> None:
        with _translated(f"delete of {key}"):
            self._client.delete_object(Bucket=self.bucket, Key=key)

    def list_objects(self, prefix: str) -> Iterator[ListedObject]:
        # Incomplete multipart uploads are not objects and are not listed: a bucket lifecycle rule
        # aborts them (docs/operators.md, "Retention").
        with _translated(f"listing of {prefix}"):
            for page in self._client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix):
                for item in page.get("Contents", []):
                    yield ListedObject(key=str(item["Key"]), modified_at=item["LastModified"])


@contextmanager
def _translated(what: str) -> Iterator[None]:
    """botocore's errors, after its own retries, as ours (``_classify``); other errors pass unchanged."""
    try:
        yield
    except (ClientError, BotoCoreError) as e:
        raise _classify(e, what) from e
    except Exception as e:
        # boto3's S3UploadFailedError wraps the ClientError as text only; look at its cause.
        cause = e.__cause__ or e.__context__
        if isinstance(cause, ClientError | BotoCoreError):
            raise _classify(cause, what) from e
        raise


def _check_head(key: str, head: dict[str, Any], size: int, digest: str) -> None:
    stored_size = head.get("ContentLength")
    stored_digest = head.get("Metadata", {}).get("sha256")
    problems = []
    if stored_size != size:
        problems.append(f"size {stored_size} != {size}")
    if stored_digest != digest:
        problems.append(f"sha256 metadata {stored_digest} != {digest}")
    # A single-part upload's checksum is the whole object's; a multipart one is a checksum of parts.
    server_checksum = head.get("ChecksumSHA256")
    whole = base64.b64encode(bytes.fromhex(digest)).decode()
    single_part = server_checksum and "-" not in server_checksum and head.get("ChecksumType") != "COMPOSITE"
    if single_part and server_checksum != whole:
        problems.append(f"server sha256 {server_checksum} != {whole}")
    if problems:
        raise TransientError(ErrorCode.upload_failed, f"stored {key} does not match the file: {'; '.join(problems)}")


def _sha256_file(path: Path) -> tuple[str, int]:
    digest = hashlib.sha256()
    size = 0
    with path.open("rb") as f:
        while block := f.read(_HASH_BLOCK):
            digest.update(block)
            size += len(block)
    return digest.hexdigest(), size


def _status(e: ClientError) -> int:
    return int(e.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0))


def _code(e: ClientError) -> str:
    return str(e.response.get("Error", {}).get("Code", ""))


def _classify(e: Exception, what: str) -> JobError | TransientError:
    """Transient (retry the job later) or a refusal (fail it now), after botocore's own retries."""
    if isinstance(e, ClientError):
        status, code = _status(e), _code(e)
        if status >= 500 or status == 429 or code in _TRANSIENT_CODES:
            return TransientError(ErrorCode.upload_failed, f"{what} failed ({code or status}): {e}")
        return JobError(ErrorCode.upload_failed, f"{what} refused ({code or status}): {e}")
    if isinstance(e, BotoConnectionError | HTTPClientError):  # refused, reset, timed out: no answer
        return BackendUnavailable(f"{what} failed: {e}", code=ErrorCode.upload_failed)
    return TransientError(ErrorCode.upload_failed, f"{what} failed: {e}")
