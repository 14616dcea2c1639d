"""Persisted compile caches: a second worker on the same image starts ready without compiling again.

A compiled model's load-time warm-up (``pipelines.runtime.compile``) runs dynamo, AOTAutograd and inductor
for every graph of its repeated blocks: seconds to minutes a start. Two of torch's public caches keep that
work between processes, and both live under ``models.compile_cache_dir`` (``<data_dir>/compile-cache``):

- **inductor's cache directory** (``TORCHINDUCTOR_CACHE_DIR``: the FX graph and AOTAutograd caches and the
  compiled kernels, C++ shared objects on a CPU). ``use_inductor_dir`` points it at ``<dir>/<versions>/
  inductor`` before the first compile, unless the operator set it. A worker on the same volume (a restart,
  a second worker on the node, a shared volume) finds every kernel there.
- **the compile's cache artifacts** (``torch.compiler.save_cache_artifacts`` / ``load_cache_artifacts``:
  one portable blob of the FX graph and AOTAutograd entries, with Triton's kernels on a GPU) kept per model
  at ``<versions>/<model>-<digest>.bin`` in the directory and, where ``models.compile_cache_in_store`` is
  on, in the artifact store (the worker's ``worker.compile_cache``), so a worker on another machine starts
  from them. ``persisted`` loads them before the warm-up and saves them after a warm-up that had none.

Trust: a cache artifact is code. torch writes each artifact it loads into its caches under the artifact's own
key, and unpickles it when a compile looks it up, so a blob planted in the store (anyone holding its credentials)
or in the directory would run in every worker that loads it. So every blob is sealed with an HMAC-SHA256 under a
worker-only key (``models.compile_cache_key``, else ``<data_dir>/compile-cache.key``), kept apart from the blobs,
and a blob is loaded only when its seal holds for its own cache key and every artifact key in it is a plain name
(``artifact_keys``: no ``..``, no absolute path). The directory itself must be this process's own and writable by
no one else (``refusal``): inductor unpickles what is in it too. A refused blob or directory is logged and the
model compiles afresh; a job never fails for it.

The key: ``versions`` names what makes compiled code incompatible (torch, its CUDA and Triton, diffusers,
Python, the device kind), ``model_key`` what changes the graphs of one model (its weights, sizes and
runtime profile). A stale or foreign entry is never wrong to load (torch checks its own keys on use): it is
simply not used, and the warm-up compiles as without a cache. Old ``<versions>`` directories (another
image's) are removed once untouched for ``STALE_AFTER``, so the directory does not grow without a bound.
"""

from __future__ import annotations

import base64
import getpass
import hashlib
import hmac
import json
import logging
import os
import platform
import re
import shutil
import stat
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from pipelines.errors import CompileCacheRefused

if TYPE_CHECKING:
    from foundation.core.catalog import ModelSpec, RuntimeProfile

__all__ = [
    "INDUCTOR_ENV",
    "STALE_AFTER",
    "ArtifactSource",
    "CompileCacheDir",
    "Persisted",
    "artifact_keys",
    "model_key",
    "persisted",
    "refusal",
    "seal",
    "unseal",
    "use_inductor_dir",
    "versions",
]

log = logging.getLogger("genworker.pipelines.compile_cache")

INDUCTOR_ENV = "TORCHINDUCTOR_CACHE_DIR"
STALE_AFTER = timedelta(days=14)  # a <versions> directory untouched this long belongs to an image no longer run

_SEALED = b"genworker-compile-cache/1\n"  # then the HMAC-SHA256 of (cache key, torch's blob), then torch's blob
_DIGEST = hashlib.sha256().digest_size
# One or two path parts of letters, digits and ``_.:-``, none starting with a dot: what torch 2.13 names its
# artifacts (inductor and AOTAutograd: one base32 hash; autotune: ``<2 chars>/<hash>.best_config``).
_ARTIFACT_KEY = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]*(/[A-Za-z0-9][A-Za-z0-9_.:-]*)?")


def seal(secret: bytes, key: str, blob: bytes) -> bytes:
    """``blob`` as stored: marked, and authenticated for ``key`` (a blob moved to another key does not open)."""
    return _SEALED + hmac.new(secret, key.encode() + b"\n" + blob, hashlib.sha256).digest() + blob


def unseal(secret: bytes, key: str, sealed: bytes) -> bytes:
    """torch's blob out of a sealed one, or ``CompileCacheRefused`` when it is not one this key made for ``key``
    or an artifact in it is named like a path out of its cache."""
    if not sealed.startswith(_SEALED):
        raise CompileCacheRefused("not a sealed compile cache (an older worker's, or not ours)")
    start = len(_SEALED) + _DIGEST
    mac, blob = sealed[len(_SEALED) : start], sealed[start:]
    if not hmac.compare_digest(mac, hmac.new(secret, key.encode() + b"\n" + blob, hashlib.sha256).digest()):
        raise CompileCacheRefused("its seal does not hold (another key made it, or it was altered)")
    for name in artifact_keys(blob):
        if not _ARTIFACT_KEY.fullmatch(name):
            raise CompileCacheRefused(f"an artifact key is not a plain name: {name[:80]!r}")
    return blob


def artifact_keys(blob: bytes) -> list[str]:
    """The artifact keys in torch's cache blob, read without loading anything (``CompileCacheRefused`` where it
    does not parse). The layout is torch 2.13's (``torch.compiler.save_cache_artifacts``): a CRC32, a version
    (1), then per artifact type its name, a count and (key, content) pairs; lengths are 8-byte big-endian, names
    and keys base64. Another torch's layout fails to parse, and the model compiles afresh."""
    position = 4
    keys: list[str] = []

    def number() -> int:
        nonlocal position
        if position + 8 > len(blob):
            raise CompileCacheRefused("a compile cache blob ends early")
        value = int.from_bytes(blob[position : position + 8], "big")
        position += 8
        return value

    def chunk() -> bytes:
        nonlocal position
        size = number()
        if position + size > len(blob):
            raise CompileCacheRefused("a compile cache blob ends early")
        position += size
        return blob[position - size : position]

    if number() != 1:
        raise CompileCacheRefused("a compile cache blob of another layout version")
    try:
        while position < len(blob):
            chunk()  # the artifact type
            for _ in range(number()):
                keys.append(base64.b64decode(chunk(), validate=True).decode())
                chunk()  # the content, loaded only once the blob is accepted
    except ValueError as e:  # binascii.Error and UnicodeDecodeError are ValueErrors
        raise CompileCacheRefused(f"a compile cache blob that does not parse: {e}") from None
    return keys


def refusal(directory: Path) -> str | None:
    """Why ``directory`` must not hold caches this process loads (None: it may): it must be this process's own
    and writable by no one else, or another local user could plant code in it."""
    try:
        info = directory.stat()
    except FileNotFoundError:
        return None
    if info.st_uid != os.getuid():
        return f"{directory} is owned by uid {info.st_uid}, not this process's ({os.getuid()})"
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"{directory} is writable by its group or by everyone (mode {stat.S_IMODE(info.st_mode):o})"
    return None


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def versions(device: str) -> str:
    """What compiled code depends on beyond the model, as one directory name: readable, then a digest."""
    import torch

    kind = device.split(":", maxsplit=1)[0]
    if kind == "cuda" and torch.cuda.is_available():
        major, minor = torch.cuda.get_device_capability(device)
        hardware = f"sm{major}{minor}-{torch.cuda.get_device_name(device)}"
    else:
        hardware = f"{kind}-{platform.machine()}"
    parts = {
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "triton": _version("triton"),
        "diffusers": _version("diffusers"),
        "python": f"{sys.version_info.major}.{sys.version_info.minor}",
        "hardware": hardware,
    }
    digest = hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:12]
    return f"torch{torch.__version__.replace('+', '-')}-{kind}-{digest}"


def model_key(spec: ModelSpec, profile: RuntimeProfile, device: str) -> str:
    """``<model>-<digest>``: the model's weights, the sizes its warm-up compiles for, its effective profile."""
    inputs = {
        "model": spec.model_dump(
            mode="json",
            include={"id", "weights", "revision", "dtype", "fps", "frame_rule", "stride", "resolutions", "ratios"}
            | {"durations", "generation_sizes"},
        ),
        "profile": profile.model_dump(mode="json"),
        "device": device,
    }
    return f"{spec.id}-{hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()[:16]}"


class ArtifactSource(Protocol):
    """Where cache artifacts are kept: ``key`` is ``<versions>/<model key>``."""

    def read(self, key: str) -> bytes | None: ...

    def write(self, key: str, blob: bytes) -> None: ...


@dataclass(frozen=True)
class CompileCacheDir:
    """``models.compile_cache_dir``: per versions, inductor's directory and the models' artifact blobs."""

    root: Path

    def path(self, key: str) -> Path:
        return self.root / f"{key}.bin"

    def read(self, key: str) -> bytes | None:
        try:
            return self.path(key).read_bytes()
        except FileNotFoundError:
            return None

    def write(self, key: str, blob: bytes) -> None:
        """Whole or not at all: a concurrent reader never sees half a blob (temp file, then a rename)."""
        target = self.path(key)
        target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(blob)
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def inductor_dir(self, versions_name: str) -> Path:
        return self.root / versions_name / "inductor"

    def prune(self, keep: str, *, now: float | None = None) -> list[str]:
        """Remove the ``<versions>`` directories other than ``keep`` untouched for ``STALE_AFTER``; their names."""
        now = time.time() if now is None else now
        removed = []
        for child in self.root.iterdir() if self.root.is_dir() else ():
            if child.name != keep and child.is_dir() and now - child.stat().st_mtime > STALE_AFTER.total_seconds():
                shutil.rmtree(child, ignore_errors=True)
                removed.append(child.name)
        return removed


def _torch_default_dir() -> str:
    """Where inductor caches when nobody chose: ``<tmp>/torchinductor_<user>``. Importing diffusers already
    asks inductor for its directory, which writes this default into ``TORCHINDUCTOR_CACHE_DIR``, so the
    default found there is not an operator's choice."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = f"uid_{os.getuid()}"
    return os.path.join(tempfile.gettempdir(), "torchinductor_" + re.sub(r'[\\/:*?"<>|]', "_", user))


def use_inductor_dir(cache: CompileCacheDir, versions_name: str) -> Path:
    """Point inductor's cache at the persisted directory for these versions (before the first compile: inductor
    reads the variable at each use), unless the operator chose one (``TORCHINDUCTOR_CACHE_DIR`` set to other
    than torch's default): then that one. The directory in use."""
    chosen = os.environ.get(INDUCTOR_ENV)
    if chosen and os.path.abspath(chosen) != os.path.abspath(_torch_default_dir()):
        return Path(chosen)
    target = cache.inductor_dir(versions_name)
    target.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.utime(target.parent)  # touched at each start: prune keeps what is still run
    os.environ[INDUCTOR_ENV] = str(target)
    for stale in cache.prune(keep=versions_name):
        log.info("stale compile cache removed", extra={"versions": stale})
    return target


@dataclass
class Persisted:
    """What ``persisted`` did: ``found`` where (a source's class name), ``loaded`` the artifact kinds it
    loaded, ``saved`` the sources written after the warm-up."""

    key: str
    found: str | None = None
    loaded: list[str] = field(default_factory=list)
    saved: list[str] = field(default_factory=list)


def _load(key: str, sources: list[ArtifactSource], secret: bytes, done: Persisted) -> None:
    import torch

    for source in sources:
        try:
            sealed = source.read(key)
            info = torch.compiler.load_cache_artifacts(unseal(secret, key, sealed)) if sealed else None
        except Exception as e:  # a cache is an optimization: any failure to read it means compiling
            where = type(source).__name__
            log.warning("compile cache not loaded", extra={"key": key, "source": where, "error": str(e)})
            continue
        if info is not None:
            done.found = type(source).__name__
            done.loaded = sorted(kind for kind, entries in info.artifacts.items() if entries)
            return


def _save(key: str, sources: list[ArtifactSource], secret: bytes, done: Persisted) -> None:
    import torch

    made = torch.compiler.save_cache_artifacts()
    if made is None:  # nothing compiled through inductor: nothing to keep
        return
    for source in sources:
        try:
            source.write(key, seal(secret, key, made[0]))
            done.saved.append(type(source).__name__)
        except Exception as e:
            log.warning("compile cache not saved", extra={"key": key, "source": type(source).__name__, "error": str(e)})


@contextmanager
def persisted(key: str, sources: list[ArtifactSource], *, secret: bytes) -> Iterator[Persisted]:
    """Around a warm-up: load the first artifacts found under ``key`` (in ``sources`` order) whose seal holds
    under ``secret``, and after a warm-up that found none, save what it compiled, sealed, to every source.
    Nothing is saved when the body raises. ``sources`` empty: a no-op."""
    done = Persisted(key=key)
    if sources:
        _load(key, sources, secret, done)
    yield done
    if sources and done.found is None:
        _save(key, sources, secret, done)
