"""The registry: adapter paths, weights resolution, device and dtype, and clear load errors."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from foundation.core.catalog import Catalog
from foundation.core.errors import ErrorCode
from foundation.settings.models import ModelRuntimeSettings
from pipelines.errors import ModelLoadError
from pipelines.families.wan import WanTextToVideo
from pipelines.runtime.adapter import Adapter
from pipelines.runtime.registry import adapter_class, load_adapter, resolve_device, resolve_dtype, resolve_weights

ROOT = Path(__file__).resolve().parents[2]


def test_catalog_adapters_resolve(catalog: Catalog) -> None:
    from pipelines.families.ltx2 import LTX2TextToVideo

    classes = {spec.id: adapter_class(spec.adapter) for spec in catalog.models.values()}
    assert classes["tiny-wan"] is classes["wan2.2-t2v-a14b"] is WanTextToVideo
    assert classes["tiny-ltx2"] is classes["ltx-2"] is LTX2TextToVideo


def test_the_test_catalogs_adapters_resolve() -> None:
    """The fault-injecting and instant adapters the worker tests, the soak and bench_worker load are adapters too
    (an InstantWan that was not made every soak worker refuse to start)."""
    faults = yaml.safe_load((ROOT / "tests" / "integration" / "catalog_faults.yaml").read_text(encoding="utf-8"))
    paths = {model["adapter"] for model in faults["models"]}
    assert "tests.integration.faulty_adapters:InstantWan" in paths
    for path in sorted(paths):
        assert Adapter in adapter_class(path).__mro__, path  # what adapter_class checks, here by its own test


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("pipelines.nope:Thing", "cannot import module 'pipelines.nope'"),
        ("pipelines.families.wan:Nope", "has no class 'Nope'"),
        ("pipelines.families.wan", "not of the form"),
        ("foundation.core.media:Media", "does not subclass pipelines.runtime.adapter.Adapter"),
    ],
)
def test_bad_adapter_paths_fail_clearly(path: str, message: str) -> None:
    with pytest.raises(ModelLoadError) as raised:
        adapter_class(path)
    assert message in raised.value.message
    assert path in raised.value.message
    assert raised.value.code == ErrorCode.model_load_failed


def test_weights_resolution_order(tmp_path: Path) -> None:
    runtime = ModelRuntimeSettings(tiny_models_dir=str(tmp_path / "tiny"), weights_dir=str(tmp_path / "weights"))
    (tmp_path / "tiny" / "tiny-wan").mkdir(parents=True)
    assert resolve_weights("tiny-wan", runtime, tiny=True) == str(tmp_path / "tiny" / "tiny-wan")
    local = tmp_path / "my-weights"
    local.mkdir()
    assert resolve_weights(str(local), runtime, tiny=False) == str(local)
    hub_id = "Wan-AI/Wan2.1-T2V-1.3B-Diffusers"
    assert resolve_weights(hub_id, runtime, tiny=False) == hub_id  # not under weights_dir: from_pretrained's job
    (tmp_path / "weights" / hub_id).mkdir(parents=True)
    assert resolve_weights(hub_id, runtime, tiny=False) == str(tmp_path / "weights" / hub_id)


def test_missing_weights_fail_clearly(tmp_path: Path) -> None:
    runtime = ModelRuntimeSettings(tiny_models_dir=str(tmp_path))
    with pytest.raises(ModelLoadError, match=r"make_tiny_models\.py") as raised:
        resolve_weights("tiny-wan", runtime, tiny=True)
    assert str(tmp_path / "tiny-wan") in raised.value.message
    with pytest.raises(ModelLoadError, match="does not exist"):
        resolve_weights(str(tmp_path / "absent"), runtime, tiny=False)


def test_load_adapter_wraps_loader_errors(tmp_path: Path, catalog: Catalog, tiny_runtime: ModelRuntimeSettings) -> None:
    (tmp_path / "empty").mkdir()
    spec = catalog.models["tiny-wan"].model_copy(update={"weights": str(tmp_path / "empty"), "tiny": False})
    with pytest.raises(ModelLoadError) as raised:
        load_adapter(spec, tiny_runtime)
    assert raised.value.code == ErrorCode.model_load_failed
    assert "tiny-wan" in raised.value.message and "failed" in raised.value.message


def test_device_and_dtype() -> None:
    import torch

    assert resolve_device("auto") == ("cuda" if torch.cuda.is_available() else "cpu")
    assert resolve_device("cuda:1") == "cuda:1"
    assert resolve_dtype("auto", "bfloat16", "cpu") == "float32"
    assert resolve_dtype("auto", "bfloat16", "cuda") == "bfloat16"
    assert resolve_dtype("float16", "bfloat16", "cpu") == "float16"


def test_importing_the_package_stays_light() -> None:
    """The worker and API import these at start: diffusers, transformers and torch wait for ``load``."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "import pipelines, pipelines.runtime.cache, pipelines.runtime.registry, pipelines.runtime.prompt_extend\n"
        "import pipelines.tiny.builders\n"
        "import pipelines.families.wan, pipelines.families.ltx2\n"
        "heavy = sorted({'diffusers', 'transformers', 'torch'} & set(sys.modules))\n"
        "print(','.join(heavy))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == ""
