"""The sender's slots: attempts in flight, counted per endpoint and per project, under three caps.

``webhooks.concurrency`` bounds the sender, ``max_in_flight_per_project`` one tenant and
``max_in_flight_per_endpoint`` one receiver (one while its circuit is half-open). With the project cap
below the total, receivers that accept and never answer hold at most that many slots for a timeout
each, and every other project's deliveries find a free slot. The counts are this process's: N senders
sharing one store allow N times the caps, each sender staying fair on its own.
"""

from __future__ import annotations

import threading
from collections import Counter

from foundation.settings import WebhookSettings

__all__ = ["Slots"]


class Slots:
    def __init__(self, settings: WebhookSettings) -> None:
        self.total = settings.concurrency
        self.per_project = settings.max_in_flight_per_project
        self._lock = threading.Lock()
        self._endpoints: Counter[str] = Counter()
        self._projects: Counter[str] = Counter()
        self._used = 0

    def free(self) -> int:
        with self._lock:
            return self.total - self._used

    def by_project(self) -> Counter[str]:
        """Attempts in flight per project (a copy)."""
        with self._lock:
            return Counter(self._projects)

    def take(self, endpoint_id: str, project: str, endpoint_limit: int) -> bool:
        """One slot for an attempt to this endpoint, unless a cap is reached."""
        with self._lock:
            if (
                self._used >= self.total
                or self._projects[project] >= self.per_project
                or self._endpoints[endpoint_id] >= endpoint_limit
            ):
                return False
            self._used += 1
            self._projects[project] += 1
            self._endpoints[endpoint_id] += 1
            return True

    def give_back(self, endpoint_id: str, project: str) -> None:
        with self._lock:
            self._used -= 1
            self._projects[project] -= 1
            self._endpoints[endpoint_id] -= 1
            # Drop zero counts: the counters would otherwise keep every endpoint ever sent to.
            if not self._projects[project]:
                del self._projects[project]
            if not self._endpoints[endpoint_id]:
                del self._endpoints[endpoint_id]
