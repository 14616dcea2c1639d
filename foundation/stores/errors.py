"""The artifact stores' own exceptions; a store that cannot answer raises
``foundation.core.errors.BackendUnavailable``.

Exception tree (the classes of this module, under their branch from ``foundation.core.errors``)::

    GenworkerError
    └── RequestError
        └── InvalidKey   an object key that could escape the root, refused before any I/O (also ``ValueError``)
"""

from __future__ import annotations

from foundation.core.errors import RequestError

__all__ = ["InvalidKey"]


class InvalidKey(RequestError, ValueError):
    """A key that could escape the root or is not a plain relative path."""
