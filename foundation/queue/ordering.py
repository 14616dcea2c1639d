"""Which model a worker hosting several models claims from next (warm affinity without starvation).

The rule, the same on both backends:

1. Only models with a job waiting count; each has an *age*: how long its oldest waiting job has been
   claimable (Redis: the stream entry id's time; SQLite: ``ready_at``), on the queue's clock.
2. A model not in ``prefer`` (cold: serving it means loading weights) whose oldest job has waited
   longer than ``starve_after_s`` comes first, oldest first: no hosted model waits unboundedly.
3. Then the preferred (warm, already loaded) models, oldest first.
4. Then the other cold models, oldest first.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

__all__ = ["order_models"]


def order_models(ages_s: Mapping[str, float], prefer: Sequence[str], starve_after_s: float) -> list[str]:
    """Models with waiting work (``ages_s``: model → age of its oldest waiting job) in claim order."""
    warm = set(prefer)

    def oldest_first(models: list[str]) -> list[str]:
        return sorted(models, key=lambda m: (-ages_s[m], m))

    starving = oldest_first([m for m in ages_s if m not in warm and ages_s[m] > starve_after_s])
    preferred = oldest_first([m for m in ages_s if m in warm])
    rest = oldest_first([m for m in ages_s if m not in warm and m not in starving])
    return starving + preferred + rest
