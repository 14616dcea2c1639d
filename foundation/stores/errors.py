"""The artifact stores' own exceptions; a store that cannot answer raises
``foundation.core.errors.BackendUnavailable``.

Exception tree (the classes of this module, under ``foundation.core.errors.GenworkerError``)::

    GenworkerError
    └── InvalidKey   an object key that could escape the root (also ``ValueError``)
"""

from __future__ import annotations

from foundation.core.errors import GenworkerError

__all__ = ["InvalidKey"]


class InvalidKey(GenworkerError, ValueError):
    """A key that could escape the root or is not a plain relative path."""
