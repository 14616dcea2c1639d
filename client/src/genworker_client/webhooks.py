"""``verify_webhook``: check a genworker webhook delivery before trusting it.

Deliveries follow Standard Webhooks: headers ``webhook-id`` (the same on every retry of one delivery:
deduplicate on it), ``webhook-timestamp`` (the attempt's time, seconds) and ``webhook-signature``
(``v1,<base64 HMAC-SHA256 of "<id>.<timestamp>.<body>">`` under the endpoint's ``whsec_...`` secret).
The check is the ``standardwebhooks`` library's own: signature in constant time, timestamp within 5
minutes of now (a captured request replayed later fails).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from genworker_client.errors import ClientError

__all__ = ["InvalidWebhook", "verify_webhook"]


class InvalidWebhook(ClientError, ValueError):
    """A delivery whose signature, timestamp or headers do not check out: answer it 400, act on nothing."""

    code = "invalid_webhook"


def verify_webhook(headers: Mapping[str, str], body: bytes | str, secret: str) -> dict[str, Any]:
    """The delivery's JSON body (``{"type", "timestamp", "data"}``) once its signature and age check out;
    ``InvalidWebhook`` otherwise. Pass the raw body bytes as received, before any JSON parsing."""
    text = body.decode("utf-8") if isinstance(body, bytes) else body
    try:
        payload = Webhook(secret).verify(text, dict(headers.items()))
    except WebhookVerificationError as e:
        raise InvalidWebhook(str(e)) from None
    except (ValueError, UnicodeError) as e:  # a malformed signature header or secret
        raise InvalidWebhook(f"malformed webhook headers: {e}") from None
    if not isinstance(payload, dict):
        raise InvalidWebhook("the webhook body is not a JSON object")
    return payload
