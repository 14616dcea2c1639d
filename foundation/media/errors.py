"""The encoder's own exceptions: faults of the worker's machine, not of a job. ffmpeg refusing one job's
input is ``JobError(encode_failed)`` (``foundation.core.errors``).

Exception tree (the classes of this module, under their bases from ``foundation.core.errors``)::

    GenworkerError
    └── WorkerError
        └── WorkerFault
            ├── EncoderUnavailable   the ffmpeg binary is missing, cannot be executed or is broken
            └── WorkDiskFull         no space left on the worker's work disk while encoding
"""

from __future__ import annotations

from foundation.core.errors import ErrorCode, WorkerFault

__all__ = ["EncoderUnavailable", "WorkDiskFull"]


class EncoderUnavailable(WorkerFault):
    """ffmpeg cannot run here at all (not found, not executable, crashes on a bare ``-version``), as
    opposed to ffmpeg refusing one job's input (``JobError(encode_failed)``)."""

    def __init__(self, message: str) -> None:
        super().__init__(ErrorCode.encode_failed, message)


class WorkDiskFull(WorkerFault):
    """The work directory's filesystem has no space left (ENOSPC) for the encoder's output."""

    def __init__(self, message: str) -> None:
        super().__init__(ErrorCode.internal_error, message)
