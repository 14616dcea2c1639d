"""The ``webhooks`` section of ``Settings`` (env ``GENWORKER_WEBHOOKS__*``): signed webhook deliveries.

The sender (``api/webhooks/sender.py``) runs deliveries as a continuous pool of ``concurrency`` slots, of
which one endpoint may hold ``max_in_flight_per_endpoint`` and one project ``max_in_flight_per_project``,
so a tenant whose receivers hang cannot take every slot. An endpoint whose attempts keep failing is held
by its circuit breaker (``circuit_*``), then disabled (``disable_after_*``).
"""

from __future__ import annotations

import base64
import binascii

from pydantic import BaseModel, Field, SecretStr, field_validator, model_validator

from foundation.settings.hosts import host_port_entries

__all__ = ["WebhookSettings", "secret_keys"]


def secret_keys(value: SecretStr | None) -> list[str]:
    """The server keys a ``webhooks.secret_key`` value lists, first (the sealing key) first."""
    if value is None:
        return []
    return [k.strip() for k in value.get_secret_value().split(",") if k.strip()]


class WebhookSettings(BaseModel):
    """The ``webhooks`` section (env ``GENWORKER_WEBHOOKS__*``): signed webhook deliveries (api/webhooks)."""

    sender_in_api: bool = Field(
        default=True,
        description=(
            "Every API process runs a webhook sender thread (several senders share the work safely). "
            "Off: run `genworker webhooks serve` as its own process(es) instead."
        ),
    )
    secret_key: SecretStr | None = Field(
        default=None,
        description=(
            "Fernet key(s) (`genworker webhooks keygen`) that encrypt endpoint signing secrets at rest: one key, "
            "or several separated by commas during a rotation (the first seals, every one opens). Required on "
            "Redis, the same value on every API replica and sender; unset on SQLite: `<data_dir>/webhooks-key`."
        ),
    )
    poll_interval_s: float = Field(
        default=0.5,
        gt=0,
        description=(
            "How often an idle sender reads new queue events and due deliveries: the floor of a webhook's latency."
        ),
    )
    backoff_base_s: float = Field(
        default=5.0, gt=0, description="First retry delay; doubles per failed attempt, with equal jitter."
    )
    backoff_cap_s: float = Field(default=10_800.0, gt=0, description="Cap of one retry delay (3 h).")
    max_age_s: float = Field(
        default=86_400.0,
        gt=0,
        description="A delivery not accepted this long after its event is given up (`failed`); about 20 attempts.",
    )
    disable_after_failures: int = Field(
        default=20, ge=1, description="An endpoint is disabled after this many failed attempts in a row ..."
    )
    disable_after_s: float = Field(
        default=259_200.0, ge=0, description="... spanning at least this long (3 days); the reason is stored."
    )
    circuit_after_failures: int = Field(
        default=5,
        ge=1,
        description=(
            "After this many failed attempts in a row an endpoint's circuit opens: its deliveries wait (no "
            "attempt used) until one probe may go, and stay held while probes fail."
        ),
    )
    circuit_open_s: float = Field(
        default=30.0, gt=0, description="How long the circuit first stays open; doubles with each failed probe."
    )
    circuit_max_open_s: float = Field(default=3_600.0, gt=0, description="Cap of one open period (1 h).")
    timeout_s: float = Field(default=10.0, gt=0, description="Connect + answer time limit of one attempt.")
    lease_s: float = Field(
        default=60.0, gt=0, description="A claimed delivery is due again after this if its sender died mid-send."
    )
    concurrency: int = Field(default=16, ge=1, le=256, description="Attempts one sender has in flight at most.")
    max_in_flight_per_endpoint: int = Field(
        default=2, ge=1, description="Attempts one sender has in flight to one endpoint at most."
    )
    max_in_flight_per_project: int = Field(
        default=4,
        ge=1,
        description=(
            "Attempts one sender has in flight to one project's endpoints at most: below `concurrency`, so "
            "receivers that hang hold a few slots and every other project's deliveries keep going."
        ),
    )
    allowed_hosts: list[str] = Field(
        default_factory=list,
        description=(
            "`host:port` pairs (names or IP literals, `[v6]:port`; `host:*` for every port) a webhook may "
            "reach over plain http and on private or loopback addresses: for tests and a receiver on the "
            "embedded machine. Every other URL must be https to a public address."
        ),
    )
    max_response_bytes: int = Field(
        default=65_536,
        ge=0,
        description="At most this many bytes of a receiver's answer are received, never decoded (discarded).",
    )

    @field_validator("allowed_hosts")
    @classmethod
    def _hosts_name_ports(cls, values: list[str]) -> list[str]:
        return host_port_entries(values, "webhooks.allowed_hosts")

    @field_validator("secret_key")
    @classmethod
    def _fernet_keys(cls, value: SecretStr | None) -> SecretStr | None:
        # A bad key found here names the setting; found at the first seal, it would fail a request.
        keys = secret_keys(value)
        if value is not None and not keys:
            raise ValueError("webhooks.secret_key is empty: unset it or give a key (`genworker webhooks keygen`)")
        for n, key in enumerate(keys, 1):
            try:
                raw = base64.urlsafe_b64decode(key.encode("ascii"))
            except (binascii.Error, UnicodeEncodeError):
                raw = b""
            if len(raw) != 32:
                raise ValueError(
                    f"webhooks.secret_key: key {n} of {len(keys)} is not a Fernet key (32 url-safe base64 bytes; "
                    "make one with `genworker webhooks keygen`)"
                )
        return value

    @model_validator(mode="after")
    def _caps_nest(self) -> WebhookSettings:
        if self.max_in_flight_per_endpoint > self.max_in_flight_per_project:
            raise ValueError("webhooks.max_in_flight_per_endpoint is above webhooks.max_in_flight_per_project")
        return self
