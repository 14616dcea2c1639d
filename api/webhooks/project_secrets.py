"""The signing secret of a project's per-request webhooks (a create's ``webhook_url``).

A per-request URL has no registration to hand a secret out at, so each project has one signing secret for
all of them: made on first use (the first create with a ``webhook_url``, the first delivery, or the first
read), stored sealed under the server key as endpoint secrets are (``api.webhooks.sealing``), and readable
again by the project's write keys (``GET /v1/webhooks/signing-secret``, ``genworker webhooks secret``), since
every receiver the project points a request at needs it.

Rotation makes a new secret and keeps the previous one signing too until its grace ends: every attempt in
between carries two signatures (Standard Webhooks' space-separated list, which receivers accept when either
matches), so receivers can switch to the new secret at any moment in the window without rejecting one.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from api.webhooks.models import ProjectSecret
from api.webhooks.sealing import Sealer, new_secret
from api.webhooks.store import WebhookStore

__all__ = ["DEFAULT_GRACE", "project_secret", "rotate", "signing_secrets"]

DEFAULT_GRACE = timedelta(hours=24)  # the age at which a delivery is given up (webhooks.max_age_s default)


def project_secret(store: WebhookStore, sealer: Sealer, project: str, now: datetime) -> ProjectSecret:
    """The project's secret, made now if it has none (concurrent first uses agree on the one stored)."""
    found = store.get_project_secret(project)
    if found is not None:
        return found
    made = ProjectSecret(project=project, sealed_secret=sealer.seal(new_secret()), created_at=now)
    if store.add_project_secret(made):
        return made
    stored = store.get_project_secret(project)  # another process made it first: use theirs
    assert stored is not None  # add_project_secret refused because one is stored
    return stored


def signing_secrets(secret: ProjectSecret, sealer: Sealer, now: datetime) -> list[str]:
    """The secrets that sign an attempt now: the current one, and the previous one during its grace.
    Raises ``SealingError`` when this server key cannot open them."""
    secrets = [sealer.open(secret.sealed_secret)]
    if secret.previous_sealed is not None and secret.previous_until is not None and secret.previous_until > now:
        secrets.append(sealer.open(secret.previous_sealed))
    return secrets


def rotate(
    store: WebhookStore, sealer: Sealer, project: str, now: datetime, grace: timedelta = DEFAULT_GRACE
) -> tuple[ProjectSecret, str]:
    """A new secret for the project, and it in the clear; the current one keeps signing for ``grace``
    (none: it stops at once). A project without a secret gets its first."""
    current = project_secret(store, sealer, project, now)
    secret = new_secret()
    rotated = ProjectSecret(
        project=project,
        sealed_secret=sealer.seal(secret),
        created_at=now,
        previous_sealed=current.sealed_secret if grace > timedelta(0) else None,
        previous_until=now + grace if grace > timedelta(0) else None,
    )
    store.save_project_secret(rotated)
    return rotated, secret
