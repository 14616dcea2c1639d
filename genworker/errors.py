"""The root command's own exceptions: set-up commands that cannot start as asked, and the fleet's stop.

Exception tree (the classes of this module, under their branches from ``foundation.core.errors``)::

    GenworkerError
    └── ConfigError
        ├── FleetError      a fleet that cannot start as configured (``genworker fleet``)
        └── ScaffoldError   a name or class ``genworker pipeline new`` cannot start from (also ``ValueError``)

    Signal
    └── FleetStopped        SIGTERM unwinds the fleet's supervision loop, so the fleet stops in order
"""

from __future__ import annotations

from foundation.core.errors import ConfigError, Signal

__all__ = ["FleetError", "FleetStopped", "ScaffoldError"]


class FleetError(ConfigError):
    """A fleet that cannot start as configured (said before anything runs, where possible)."""


class FleetStopped(Signal):
    """SIGTERM: unwinds the supervision loop so the fleet stops in order."""


class ScaffoldError(ConfigError, ValueError):
    """A name or class the scaffold cannot start from; the message says why."""
