"""Persisted compile caches (``pipelines.runtime.compile_cache``, ``worker.compile_cache``): the key, the
inductor directory, and one real inductor compile (an extern-only graph: seconds, no C++ kernel) whose
artifacts are written under the model's key and loaded from the directory or the artifact store. The timing
of a compiled tiny model's second start is ``make test-long`` (tests/long/test_compile_cache.py)."""

from __future__ import annotations

import getpass
import os
import pickle
import tempfile
import time
from pathlib import Path

import pytest
import torch

from foundation.core.catalog import Catalog
from foundation.stores.local import LocalStore
from pipelines.errors import CompileCacheRefused
from pipelines.runtime.compile_cache import (
    INDUCTOR_ENV,
    STALE_AFTER,
    CompileCacheDir,
    artifact_keys,
    model_key,
    persisted,
    refusal,
    seal,
    unseal,
    use_inductor_dir,
    versions,
)
from worker.compile_cache import StoreArtifacts

SECRET = b"k" * 32
# Inductor's CPU path calls torch.jit.script_method, deprecated in this torch (tests/long/test_compile.py).
COMPILES = pytest.mark.filterwarnings("ignore:`torch.jit.script_method` is deprecated:DeprecationWarning")


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


@COMPILES
def test_compile_artifacts_are_written_and_loaded_under_the_models_key(catalog: Catalog, tmp_path: Path) -> None:
    spec = catalog.models["tiny-wan"]
    profile = spec.runtime.model_copy(update={"compile": True})
    key = f"{versions('cpu')}/{model_key(spec, profile, 'cpu')}"
    cache = CompileCacheDir(tmp_path / "compile-cache")

    with persisted(key, [cache], secret=SECRET) as first:
        compiled = torch.compile(lambda x, y: x @ y)
        assert compiled(torch.ones(2, 3), torch.ones(3, 2)).sum().item() == 12.0
    assert first.found is None and first.saved == ["CompileCacheDir"]
    written = cache.path(key)
    assert written == tmp_path / "compile-cache" / versions("cpu") / f"{model_key(spec, profile, 'cpu')}.bin"
    stamp = written.stat().st_mtime_ns

    with persisted(key, [cache], secret=SECRET) as second:  # the next start: found, loaded, not written again
        pass
    assert second.found == "CompileCacheDir" and "inductor" in second.loaded and second.saved == []
    assert written.stat().st_mtime_ns == stamp

    other = f"{versions('cpu')}/{model_key(spec, spec.runtime, 'cpu')}"  # another profile: another key
    empty = CompileCacheDir(tmp_path / "empty")
    with persisted(other, [empty], secret=SECRET) as third:
        pass
    assert third.found is None and third.loaded == []

    # A fresh machine: nothing in its directory, the artifacts in the store (written by an earlier worker).
    store = LocalStore(tmp_path / "store", b"s" * 32, "http://127.0.0.1/artifacts", 60)
    blob = cache.read(key)
    assert blob is not None
    StoreArtifacts(store).write(key, blob)
    assert store.exists(f"compile-cache/{key}.bin")
    with persisted(key, [CompileCacheDir(tmp_path / "fresh"), StoreArtifacts(store)], secret=SECRET) as fresh:
        pass
    assert fresh.found == "StoreArtifacts" and "inductor" in fresh.loaded
    # A blob that is not torch's is skipped (a warning), never an error: the warm-up compiles.
    CompileCacheDir(tmp_path / "bad").write(key, b"not a cache")
    with persisted(key, [CompileCacheDir(tmp_path / "bad")], secret=SECRET) as bad:
        pass
    assert bad.found is None


def torch_blob(artifacts: dict[str, list[tuple[str, bytes]]]) -> bytes:
    """A blob in the layout of ``torch.compiler.save_cache_artifacts`` (what ``artifact_keys`` reads), made by
    hand as a planter would: any type, any key, any content."""
    import base64
    import zlib

    def sized(data: bytes) -> bytes:
        return len(data).to_bytes(8, "big") + data

    body = (1).to_bytes(8, "big")
    for kind, entries in artifacts.items():
        body += sized(base64.b64encode(kind.encode())) + len(entries).to_bytes(8, "big")
        for key, content in entries:
            body += sized(base64.b64encode(key.encode())) + sized(content)
    return zlib.crc32(body).to_bytes(4, "big") + body


class Planted:
    """Pickles as a call of ``open(path, "w")``: code that runs where the bytes are unpickled."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self) -> tuple[object, tuple[str, str]]:
        return (open, (str(self.path), "w"))


@COMPILES
def test_a_planted_blob_is_never_loaded_and_the_warm_up_compiles_afresh(tmp_path: Path) -> None:
    """A blob put in the store by someone holding its credentials (torch's own layout, an artifact keyed to
    land outside inductor's directory, a pickle for content) writes nothing, and the compile that follows
    replaces it with a sealed one."""
    key = f"{versions('cpu')}/tiny-wan-planted"
    planted_at, ran = tmp_path / "planted", tmp_path / "ran"
    code = pickle.dumps(
        Planted(ran)
    )  # unpickled (torch unpickles an inductor artifact as it loads it): creates ``ran``
    pickle.loads(code).close()
    assert ran.exists()  # the payload works...
    ran.unlink()
    blob = torch_blob({"inductor": [(f"../../../../../../../..{planted_at}", code)]})
    store = LocalStore(tmp_path / "store", b"s" * 32, "http://127.0.0.1/artifacts", 60)
    StoreArtifacts(store).write(key, blob)
    with persisted(key, [StoreArtifacts(store)], secret=SECRET) as done:
        compiled = torch.compile(lambda x: x @ x)
        assert compiled(torch.ones(2, 2)).sum().item() == 8.0
    assert done.found is None and not planted_at.exists() and not ran.exists()  # ...and never ran here
    kept = store.read_bytes(f"compile-cache/{key}.bin", max_bytes=1 << 30)
    assert kept is not None and kept != blob and unseal(SECRET, key, kept)  # ours now, sealed


def test_the_seal_holds_only_for_its_key_and_its_own_bytes() -> None:
    blob = torch_blob({"inductor": [("fabc123", b"x")], "autotune": [("ab/abcdef.best_config", b"{}")]})
    sealed = seal(SECRET, "v/model-1", blob)
    assert unseal(SECRET, "v/model-1", sealed) == blob
    assert artifact_keys(blob) == ["fabc123", "ab/abcdef.best_config"]
    for secret, key, data, why in [
        (b"another key" * 3, "v/model-1", sealed, "seal does not hold"),
        (SECRET, "v/model-2", sealed, "seal does not hold"),  # moved to another model's key
        (SECRET, "v/model-1", sealed[:-1] + b"y", "seal does not hold"),
        (SECRET, "v/model-1", blob, "not a sealed compile cache"),  # an older worker's, unsealed
    ]:
        with pytest.raises(CompileCacheRefused, match=why):
            unseal(secret, key, data)


@pytest.mark.parametrize("name", ["../inductor/x", "/etc/cron.d/x", "a/b/c", ".hidden", "a/../b", "a\\b"])
def test_an_artifact_named_like_a_path_is_refused_even_under_a_good_seal(name: str) -> None:
    sealed = seal(SECRET, "v/model", torch_blob({"inductor": [(name, b"x")]}))
    with pytest.raises(CompileCacheRefused, match="not a plain name"):
        unseal(SECRET, "v/model", sealed)


def test_a_blob_that_does_not_parse_is_refused() -> None:
    for blob in [b"", b"\x00" * 12, torch_blob({"inductor": [("k", b"x")]})[:-3]]:
        with pytest.raises(CompileCacheRefused):
            artifact_keys(blob)


@COMPILES
def test_the_keys_of_a_real_torch_blob_are_read_and_plain(tmp_path: Path) -> None:
    """The layout ``artifact_keys`` reads is the one this torch writes: a real compile's blob parses."""
    key = "v/real"
    cache = CompileCacheDir(tmp_path)
    with persisted(key, [cache], secret=SECRET):
        assert torch.compile(lambda x: x * 2 + 1)(torch.ones(3)).sum().item() == 9.0
    sealed = cache.read(key)
    assert sealed is not None
    names = artifact_keys(unseal(SECRET, key, sealed))
    assert names and all(name.isalnum() for name in names)


def test_a_directory_another_user_could_write_is_refused(tmp_path: Path) -> None:
    mine = tmp_path / "mine"
    mine.mkdir(mode=0o700)
    assert refusal(mine) is None and refusal(tmp_path / "absent") is None
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    assert "writable by its group or by everyone (mode 777)" in (refusal(shared) or "")
    foreign = tmp_path / "foreign"
    foreign.mkdir(mode=0o700)
    os.chown(foreign, os.getuid() + 1000, -1)  # the tests run as root here (CI too): another uid owns it
    assert f"owned by uid {os.getuid() + 1000}" in (refusal(foreign) or "")


def test_the_worker_keeps_no_cache_in_a_directory_others_can_write_and_seals_with_its_key_file(
    catalog: Catalog, tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    from types import SimpleNamespace

    from foundation.settings import Settings
    from worker.compile_cache import KEY_FILE, compile_cache

    monkeypatch.delenv(INDUCTOR_ENV, raising=False)  # no operator's choice (an earlier test may have set one)
    spec = catalog.models["tiny-wan"]
    adapter = SimpleNamespace(device="cpu", profile=spec.runtime.model_copy(update={"compile": True}))
    store = LocalStore(tmp_path / "store", b"s" * 32, "http://127.0.0.1/artifacts", 60)
    shared = tmp_path / "shared-cache"
    shared.mkdir()
    shared.chmod(0o777)
    settings = Settings(data_dir=str(tmp_path / "data"), models={"compile_cache_dir": str(shared)})
    with compile_cache(settings, store, spec, adapter) as refused:
        pass
    assert refused.key == "" and "compile cache directory refused" in caplog.text
    assert list(shared.iterdir()) == [] and not (tmp_path / "data" / KEY_FILE).exists()

    own = Settings(data_dir=str(tmp_path / "data"), models={"compile_cache_dir": str(tmp_path / "own")})
    with compile_cache(own, store, spec, adapter) as used:
        pass
    assert used.key.startswith(versions("cpu")) and (tmp_path / "own" / versions("cpu") / "inductor").is_dir()
    key_file = tmp_path / "data" / KEY_FILE
    assert key_file.stat().st_mode & 0o777 == 0o600
