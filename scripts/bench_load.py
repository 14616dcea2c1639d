"""A background load that keeps every core from going idle, for the pick-up figures.

On this machine (a 2-vCPU VM) a core with nothing to run halts, and waking it for the next process
costs far more than the work that follows: a bare Streams wake-up (``XADD`` → ``XREADGROUP``) takes
several times longer with the machine idle than while every core has something to run (the figures are in
docs/benchmarks.md). The pick-up benchmarks therefore report each figure twice: on an idle machine,
and under this load, which stands for a node whose cores are never all idle (other workers, data
loaders, the API). The load runs at the lowest priority (nice 19), so a woken process preempts it at
once; it only keeps the cores from halting.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["busy_cores"]

# At the lowest priority, spins until its parent is gone (a killed benchmark leaves no spinner behind).
_SPIN = "import os\nos.nice(19)\nparent = os.getppid()\nwhile os.getppid() == parent:\n    pass\n"


@contextmanager
def busy_cores(count: int | None = None) -> Iterator[int]:
    """One nice-19 spinning process per core (``count``: that many) while the block runs; yields how
    many. The spinners are stopped by their PIDs when the block ends."""
    spinners = [subprocess.Popen([sys.executable, "-c", _SPIN]) for _ in range(count or os.cpu_count() or 1)]
    try:
        yield len(spinners)
    finally:
        for proc in spinners:
            proc.kill()
        for proc in spinners:
            proc.wait()
