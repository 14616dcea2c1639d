"""A small JSON file that remembers, per logical generation, its Idempotency-Key and (once known) its id.

Why: the spec's retry rule only works if the key survives the process. If a script dies after sending
a create but before reading the answer, a rerun must send the *same* key so the server replays the
first generation instead of making (and charging for) a second one. The ledger writes the key to disk
before the request leaves, and the id as soon as it arrives.

Entries are keyed by a caller-chosen name ("intro-clip-v3"). A name reused with a different request
body is refused locally, as the server would refuse it with ``idempotency_conflict``. One process at a
time per file: writes are atomic (temp file + rename) but not locked across processes.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import threading
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "KeyLedger",
    "LedgerConflict",
    "LedgerEntry",
    "choose_idempotency_key",
    "fingerprint",
    "new_idempotency_key",
]


def new_idempotency_key() -> str:
    """A fresh key: 32 hex characters, within the service's 1-255 printable ASCII limit."""
    return uuid.uuid4().hex


def fingerprint(body: dict[str, Any]) -> str:
    """sha256 of the canonical JSON of a create body: equal bodies, equal fingerprints."""
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


class LedgerConflict(ValueError):
    """A ledger name already belongs to a different request body."""


@dataclass(frozen=True)
class LedgerEntry:
    idempotency_key: str
    body_sha256: str
    id: str | None = None


class KeyLedger:
    """``{name: {"idempotency_key", "body_sha256", "id"}}`` in one JSON file."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()

    def get(self, name: str) -> LedgerEntry | None:
        raw = self._read().get(name)
        return LedgerEntry(**raw) if raw is not None else None

    def reserve(self, name: str, body: dict[str, Any]) -> LedgerEntry:
        """The entry for ``name``: the stored one when the body matches, else a new key written to
        disk before this returns. Raises ``LedgerConflict`` when ``name`` holds a different body."""
        digest = fingerprint(body)
        with self._lock:
            entries = self._read()
            raw = entries.get(name)
            if raw is not None:
                entry = LedgerEntry(**raw)
                if entry.body_sha256 != digest:
                    raise LedgerConflict(f"ledger name {name!r} was used for a different request")
                return entry
            entry = LedgerEntry(idempotency_key=new_idempotency_key(), body_sha256=digest)
            entries[name] = asdict(entry)
            self._write(entries)
            return entry

    def record_id(self, name: str, generation_id: str) -> None:
        with self._lock:
            entries = self._read()
            entries[name] = {**entries[name], "id": generation_id}
            self._write(entries)

    def _read(self) -> dict[str, dict[str, Any]]:
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return {}
        data = json.loads(text)
        if not isinstance(data, dict):
            raise ValueError(f"{self.path}: not a key ledger (expected a JSON object)")
        return data

    def _write(self, entries: dict[str, dict[str, Any]]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{self.path.name}.", dir=self.path.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(entries, f, indent=2, sort_keys=True)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise


def choose_idempotency_key(
    body: dict[str, Any], *, idempotency_key: str | None, name: str | None, ledger: KeyLedger | None
) -> LedgerEntry:
    """The key for one create call, as an entry whose ``id`` is set when the ledger already knows the
    generation. The caller's own key; else the ledger's for ``name`` (on disk before this returns);
    else a fresh one, which the caller finds on the result as ``generation.idempotency_key``."""
    if name is not None and (ledger is None or idempotency_key is not None):
        raise ValueError("create(name=...) needs a client with a ledger, and no idempotency_key of its own")
    if name is not None and ledger is not None:
        return ledger.reserve(name, body)
    return LedgerEntry(idempotency_key=idempotency_key or new_idempotency_key(), body_sha256=fingerprint(body))
