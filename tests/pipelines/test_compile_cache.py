"""Persisted compile caches (``pipelines.runtime.compile_cache``, ``worker.compile_cache``): the key, the
inductor directory, and one real inductor compile (an extern-only graph: seconds, no C++ kernel) whose
artifacts are written under the model's key and loaded from the directory or the artifact store. The timing
of a compiled tiny model's second start is ``make test-long`` (tests/long/test_compile_cache.py)."""

from __future__ import annotations

import getpass
import os
import tempfile
import time
from pathlib import Path

import pytest
import torch

from foundation.core.catalog import Catalog
from foundation.stores.local import LocalStore
from pipelines.runtime.compile_cache import (
    INDUCTOR_ENV,
    STALE_AFTER,
    CompileCacheDir,
    model_key,
    persisted,
    use_inductor_dir,
    versions,
)
from worker.compile_cache import StoreArtifacts


def test_the_key_follows_the_model_its_profile_and_the_versions(catalog: Catalog) -> None:
    wan, ltx = catalog.models["tiny-wan"], catalog.models["tiny-ltx2"]
    compiled = wan.runtime.model_copy(update={"compile": True})
    key = model_key(wan, compiled, "cpu")
    assert key.startswith("tiny-wan-") and key == model_key(wan, compiled.model_copy(), "cpu")
    others = {
        model_key(wan, wan.runtime, "cpu"),  # another profile
        model_key(wan, compiled, "cuda:0"),
        model_key(wan.model_copy(update={"resolutions": ["144p"]}), compiled, "cpu"),  # other warm-up sizes
        model_key(ltx, compiled, "cpu"),
    }
    assert key not in others and len(others) == 4
    name = versions("cpu")
    assert name == versions("cpu") and name.startswith(f"torch{torch.__version__.replace('+', '-')}-cpu-")


def test_inductor_uses_the_persisted_directory_unless_the_operator_chose_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = CompileCacheDir(tmp_path)
    stale = tmp_path / "torch0.0-cpu-old"
    stale.mkdir()
    old = time.time() - STALE_AFTER.total_seconds() - 60
    os.utime(stale, (old, old))
    recent = tmp_path / "torch0.1-cpu-recent"  # another image still run beside this one
    recent.mkdir()
    monkeypatch.delenv(INDUCTOR_ENV, raising=False)
    chosen = use_inductor_dir(cache, "v1")
    assert chosen == tmp_path / "v1" / "inductor" and chosen.is_dir() and os.environ[INDUCTOR_ENV] == str(chosen)
    assert not stale.exists() and recent.is_dir()
    # Importing diffusers writes torch's default into the variable: that is no operator's choice.
    monkeypatch.setenv(INDUCTOR_ENV, os.path.join(tempfile.gettempdir(), f"torchinductor_{getpass.getuser()}"))
    assert use_inductor_dir(cache, "v1") == chosen
    monkeypatch.setenv(INDUCTOR_ENV, str(tmp_path / "operators"))
    assert use_inductor_dir(cache, "v2") == tmp_path / "operators" and not (tmp_path / "v2").exists()


# Inductor's CPU path calls torch.jit.script_method, deprecated in this torch (tests/long/test_compile.py).
@pytest.mark.filterwarnings("ignore:`torch.jit.script_method` is deprecated:DeprecationWarning")
def test_compile_artifacts_are_written_and_loaded_under_the_models_key(catalog: Catalog, tmp_path: Path) -> None:
    spec = catalog.models["tiny-wan"]
    profile = spec.runtime.model_copy(update={"compile": True})
    key = f"{versions('cpu')}/{model_key(spec, profile, 'cpu')}"
    cache = CompileCacheDir(tmp_path / "compile-cache")

    with persisted(key, [cache]) as first:
        compiled = torch.compile(lambda x, y: x @ y)
        assert compiled(torch.ones(2, 3), torch.ones(3, 2)).sum().item() == 12.0
    assert first.found is None and first.saved == ["CompileCacheDir"]
    written = cache.path(key)
    assert written == tmp_path / "compile-cache" / versions("cpu") / f"{model_key(spec, profile, 'cpu')}.bin"
    stamp = written.stat().st_mtime_ns

    with persisted(key, [cache]) as second:  # the next start: found, loaded, not written again
        pass
    assert second.found == "CompileCacheDir" and "inductor" in second.loaded and second.saved == []
    assert written.stat().st_mtime_ns == stamp

    other = f"{versions('cpu')}/{model_key(spec, spec.runtime, 'cpu')}"  # another profile: another key
    empty = CompileCacheDir(tmp_path / "empty")
    with persisted(other, [empty]) as third:
        pass
    assert third.found is None and third.loaded == []

    # A fresh machine: nothing in its directory, the artifacts in the store (written by an earlier worker).
    store = LocalStore(tmp_path / "store", b"s" * 32, "http://127.0.0.1/artifacts", 60)
    blob = cache.read(key)
    assert blob is not None
    StoreArtifacts(store).write(key, blob)
    assert store.exists(f"compile-cache/{key}.bin")
    with persisted(key, [CompileCacheDir(tmp_path / "fresh"), StoreArtifacts(store)]) as fresh:
        pass
    assert fresh.found == "StoreArtifacts" and "inductor" in fresh.loaded
    # A blob that is not torch's is skipped (a warning), never an error: the warm-up compiles.
    CompileCacheDir(tmp_path / "bad").write(key, b"not a cache")
    with persisted(key, [CompileCacheDir(tmp_path / "bad")]) as bad:
        pass
    assert bad.found is None
