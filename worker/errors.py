"""The daemon's own exceptions: how an attempt learns it must stop. Both are control flow, not failures:
they end the attempt without a verdict on the job (``worker.verdict``), and sit outside ``GenworkerError``
so that no ``except GenworkerError`` on their way up takes them for an error.

Exception tree (the classes of this module, under ``foundation.core.errors.Signal``)::

    Signal
    ├── StaleClaim       a fenced queue write refused this attempt (another attempt owns the job)
    └── JobInterrupted   the worker is stopping: release the job for re-delivery now
"""

from __future__ import annotations

from foundation.core.errors import Signal

__all__ = ["JobInterrupted", "StaleClaim"]


class StaleClaim(Signal):
    """A fenced queue call refused this attempt (re-delivered, released or finished elsewhere)."""


class JobInterrupted(Signal):
    """The worker is stopping (drain grace over, or a second signal): release the job for re-delivery."""
