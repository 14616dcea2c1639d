"""How long ``wait`` sleeps before each poll. Pure: the caller owns the clock, the sleep and the rng.

The spec's rule: poll about 5 s after create, then every 10-15 s with jitter. The service may also
send ``Retry-After`` on a non-terminal record; the client never polls sooner than that hint, so the
delay before a poll is ``max(own cadence, Retry-After of the previous answer)``.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

__all__ = ["PollCadence"]


@dataclass(frozen=True)
class PollCadence:
    """``first_s`` before the first poll (no jitter: creates are already spread out in time), then a
    uniform draw in ``[min_s, max_s]`` before each later one, so many clients do not poll in step."""

    first_s: float = 5.0
    min_s: float = 10.0
    max_s: float = 15.0

    def __post_init__(self) -> None:
        if self.first_s < 0 or self.min_s < 0 or self.max_s < self.min_s:
            raise ValueError(f"bad poll cadence: first_s={self.first_s}, min_s={self.min_s}, max_s={self.max_s}")

    def delay_s(self, poll_index: int, *, retry_after_s: float | None, rng: random.Random) -> float:
        """Seconds to sleep before poll number ``poll_index`` (0 = the first poll after create)."""
        own = self.first_s if poll_index == 0 else rng.uniform(self.min_s, self.max_s)
        if retry_after_s is None:
            return own
        return max(own, retry_after_s)
