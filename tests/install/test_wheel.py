"""The short version of the production-install check, for make test (the install itself, every job in it and a
worker killed and resumed there are ``make test-install``, which .ci/run also runs): the server wheel as
Dockerfile.gpu builds it carries the catalog and every architecture config, its ``worker`` extra names the
packages only some code paths import, and the lock holds every distribution the shipped code imports."""

from __future__ import annotations

import email
import importlib.metadata
import re
import subprocess
import sys
import zipfile

import pytest

from tests.install.prod_venv import LOCK, ROOT, imported_modules

OURS = {"foundation", "worker", "pipelines", "api", "genworker", "genworker_client"}
# The server wheel's packages (the client is a wheel of its own, with its own dependencies).
SHIPPED = ["foundation", "worker", "pipelines", "api", "genworker"]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> zipfile.ZipFile:
    out = tmp_path_factory.mktemp("wheel")
    cmd = [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--wheel-dir", str(out), str(ROOT)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return zipfile.ZipFile(next(out.glob("genworker-*.whl")))


def test_the_wheel_carries_the_catalog_and_every_architecture_config(wheel: zipfile.ZipFile) -> None:
    shipped = {name for name in wheel.namelist() if name.startswith("foundation/core/configs/")}
    expected = {
        "foundation/core/configs/" + path.relative_to(ROOT / "configs").as_posix()
        for path in (ROOT / "configs").rglob("*")
        if path.is_file()
    }
    assert "foundation/core/configs/models.yaml" in shipped
    assert expected <= shipped, sorted(expected - shipped)


def test_the_worker_extra_names_what_only_some_code_paths_import(wheel: zipfile.ZipFile) -> None:
    metadata_name = next(n for n in wheel.namelist() if n.endswith(".dist-info/METADATA"))
    metadata = email.message_from_bytes(wheel.read(metadata_name))
    extra = {
        re.split(r"[<>=!~; \[]", requirement, maxsplit=1)[0].lower()
        for requirement in metadata.get_all("Requires-Dist") or []
        if "extra == 'worker'" in requirement or 'extra == "worker"' in requirement
    }
    # av: LTX-2 image_to_video; torchao: fp8 compute; peft: LoRA variants; tqdm: its monitor switched off.
    assert {"torch", "diffusers", "av", "torchao", "peft", "tqdm", "imageio-ffmpeg"} <= extra, sorted(extra)


def test_the_lock_holds_every_distribution_the_shipped_code_imports() -> None:
    locked = {
        line.split("==")[0].strip().lower().replace("_", "-")
        for line in LOCK.read_text(encoding="utf-8").splitlines()
        if "==" in line and not line.lstrip().startswith("#")
    }
    imported: dict[str, str] = {}
    for package in SHIPPED:
        imported |= imported_modules(ROOT / package)
    third_party = {m: where for m, where in imported.items() if m not in sys.stdlib_module_names and m not in OURS}
    distributions = importlib.metadata.packages_distributions()
    missing = {
        module: where
        for module, where in third_party.items()
        if not any(d.lower().replace("_", "-") in locked for d in distributions.get(module, [module]))
    }
    assert {"torch", "diffusers", "torchao", "peft"} <= set(third_party)  # the scan sees function-level imports
    assert missing == {}, "imported by the shipped code but not in requirements/worker.lock (make lock)"
