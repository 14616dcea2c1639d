"""``requirements/worker.lock`` agrees with the pyproject files it was compiled from (``make lock``).

The lock is what a worker image installs (``--no-deps``) and what ``make test`` installs against, so a
dependency added to a pyproject without ``make lock`` would be missing from the image, and one removed would
linger in it. Transitive completeness is proven where it can be: ``pip check`` in the production-install test.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
LOCK = ROOT / "requirements" / "worker.lock"
OURS = {"genworker", "genworker-client"}
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)$")


def _locked() -> tuple[dict[str, str], dict[str, set[str]]]:
    """Pinned versions, and for each pin the packages uv noted it is there for (its ``# via`` lines)."""
    versions: dict[str, str] = {}
    via: dict[str, set[str]] = {}
    current = ""
    for line in LOCK.read_text(encoding="utf-8").splitlines():
        if match := PIN.match(line):
            current = canonicalize_name(match.group(1))
            versions[current], via[current] = match.group(2), set()
        elif current and line.startswith("    #") and (name := line.strip("# ").removeprefix("via").strip()):
            via[current].add(canonicalize_name(name))
    return versions, via


def _direct() -> list[Requirement]:
    """What requirements/worker.in installs directly: the client with ``cli``, the server with ``worker``."""
    out: list[Requirement] = []
    for pyproject, extra in ((ROOT / "client" / "pyproject.toml", "cli"), (ROOT / "pyproject.toml", "worker")):
        project = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]
        for text in [*project["dependencies"], *project["optional-dependencies"][extra]]:
            req = Requirement(text)
            if canonicalize_name(req.name) not in OURS and (req.marker is None or req.marker.evaluate()):
                out.append(req)
    return out


def test_every_direct_dependency_is_locked_at_a_version_its_pyproject_admits() -> None:
    versions, _ = _locked()
    wrong = []
    for req in _direct():
        locked = versions.get(canonicalize_name(req.name))
        if locked is None or not req.specifier.contains(locked, prereleases=True):
            wrong.append(f"{req} (locked: {locked})")
    assert not wrong, f"requirements/worker.lock is stale, run make lock: {wrong}"


def test_every_pin_is_there_for_a_requirement() -> None:
    """A pin for the server or the client alone must still be one of their requirements (a dependency removed
    from a pyproject leaves the lock with make lock); other pins are there for another pinned package."""
    versions, via = _locked()
    direct = {canonicalize_name(r.name) for r in _direct()}
    stale = [name for name in versions if not (via[name] - OURS) and name not in direct]
    assert not stale, f"pinned for nothing any more, run make lock: {stale}"
    assert all(via[name] for name in versions), "a pin without its # via lines: was the lock edited by hand?"


def test_the_lock_names_torch_by_version_and_no_cuda_build() -> None:
    """torch==2.13.0 is met by the CPU wheel (make test) and by the CUDA build an image installs first, whose
    CUDA libraries torch pins itself; a lock naming nvidia-*, triton or a +cpu/+cu build was resolved against a
    CUDA wheel or a local build and would pull gigabytes onto a CPU machine, or fail in the image."""
    versions, _ = _locked()
    assert versions["torch"] == "2.13.0"
    assert not [n for n in versions if n.startswith(("nvidia-", "cuda-")) or n == "triton"]
    assert not [f"{n}=={v}" for n, v in versions.items() if "+" in v]
