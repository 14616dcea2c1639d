"""The service's retry delay: a capped exponential with "equal jitter", every delay in ``[c/2, c]``.

The webhook sender waits this long between a delivery's attempts (``api/webhooks/sender.py``). The client
package retries with the same rule (``genworker_client.retry.backoff_s``) but keeps its own copy: it is
installed alone and imports nothing of the service's, and the service's tiers do not import it.
"""

from __future__ import annotations

import random

__all__ = ["backoff_s"]


def backoff_s(retry_index: int, *, base_s: float, cap_s: float, rng: random.Random) -> float:
    """Delay before retry number ``retry_index`` (0 = first retry): uniform in ``[c/2, c]``, where
    ``c = min(cap_s, base_s * 2**retry_index)``. Half of it is fixed so retries never bunch at zero;
    the other half spreads the senders that failed together (one receiver's outage) over ``c/2``."""
    try:
        ceiling = min(cap_s, base_s * 2.0**retry_index)
    except OverflowError:  # a retry index past float range: the cap
        ceiling = cap_s
    return ceiling / 2.0 + rng.uniform(0.0, ceiling / 2.0)
