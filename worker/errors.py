"""The daemon's own exceptions: how an attempt learns it must stop. Both end the attempt without a
verdict on the job (``worker.verdict``).

Exception tree (the classes of this module, under ``foundation.core.errors.GenworkerError``)::

    GenworkerError
    ├── StaleClaim       a fenced queue write refused this attempt (another attempt owns the job)
    └── JobInterrupted   the worker is stopping: release the job for re-delivery now
"""

from __future__ import annotations

from foundation.core.errors import GenworkerError

__all__ = ["JobInterrupted", "StaleClaim"]


class StaleClaim(GenworkerError):
    """A fenced queue call refused this attempt (re-delivered, released or finished elsewhere)."""


class JobInterrupted(GenworkerError):
    """The worker is stopping (drain grace over, or a second signal): release the job for re-delivery."""
