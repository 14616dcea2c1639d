"""The root command's own exceptions: set-up commands that cannot start as asked.

Exception tree (the classes of this module, under ``foundation.core.errors.GenworkerError``)::

    GenworkerError
    ├── FleetError      a fleet that cannot start as configured (``genworker fleet``)
    ├── FleetStopped    SIGTERM unwinds the fleet's supervision loop, so the fleet stops in order
    └── ScaffoldError   a name or class ``genworker pipeline new`` cannot start from (also ``ValueError``)
"""

from __future__ import annotations

from foundation.core.errors import GenworkerError

__all__ = ["FleetError", "FleetStopped", "ScaffoldError"]


class FleetError(GenworkerError):
    """A fleet that cannot start as configured (said before anything runs, where possible)."""


class FleetStopped(GenworkerError):
    """SIGTERM: unwinds the supervision loop so the fleet stops in order."""


class ScaffoldError(GenworkerError, ValueError):
    """A name or class the scaffold cannot start from; the message says why."""
