"""``genworker weights pull`` / ``verify`` against a local mirror laid out like the hub cache: exactly the files a
model loads arrive (no dtype variants, pickles, root single-file checkpoints or other LoRAs), each checked
against the hash its source states, and ``verify`` names a missing, truncated or altered file."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from foundation.core.catalog import Catalog, ModelSpec, load_catalog
from genworker.cli import app
from pipelines.errors import ModelLoadError
from pipelines.runtime.weights import MANIFEST, needed, pull, verify

WAN_COMMIT = "1" * 40
QWEN_COMMIT = "a09a35458c702b33eeacc393d103063234e8bc28"  # the shipped pin of the Wan prompt extender's LLM
LORA_COMMIT = "3" * 40

WAN_REPO = {
    "model_index.json": json.dumps(
        {
            "_class_name": "WanPipeline",
            "scheduler": ["diffusers", "UniPCMultistepScheduler"],
            "text_encoder": ["transformers", "UMT5EncoderModel"],
            "tokenizer": ["transformers", "T5TokenizerFast"],
            "transformer": ["diffusers", "WanTransformer3DModel"],
            "transformer_2": [None, None],
            "vae": ["diffusers", "AutoencoderKLWan"],
        }
    ).encode(),
    "scheduler/scheduler_config.json": b"{}",
    "text_encoder/config.json": b"{}",
    "text_encoder/model-00001-of-00002.safetensors": b"t5-a" * 64,
    "text_encoder/model-00002-of-00002.safetensors": b"t5-b" * 64,
    "text_encoder/model.safetensors.index.json": b"{}",
    "tokenizer/spiece.model": b"spm",
    "tokenizer/tokenizer_config.json": b"{}",
    "transformer/config.json": b"{}",
    "transformer/diffusion_pytorch_model-00001-of-00002.safetensors": b"dit-a" * 64,
    "transformer/diffusion_pytorch_model-00002-of-00002.safetensors": b"dit-b" * 64,
    "transformer/diffusion_pytorch_model.safetensors.index.json": b"{}",
    "vae/config.json": b"{}",
    "vae/diffusion_pytorch_model.safetensors": b"vae" * 64,
    # Never loaded: a dtype variant, its index, a pickle, an original checkpoint, a folder no component names.
    "transformer/diffusion_pytorch_model.fp16.safetensors": b"half" * 64,
    "transformer/diffusion_pytorch_model.safetensors.index.fp16.json": b"{}",
    "vae/diffusion_pytorch_model.bin": b"pickle" * 64,
    "Wan2.1_VAE.pth": b"original" * 64,
    "examples/i2v_input.JPG": b"jpeg",
}
LORA_REPO = {
    "wan2.1_t2v_14b_lora_rank64_lightx2v_4step.safetensors": b"lora" * 64,
    "wan2.1_i2v_lora_rank64_lightx2v_4step.safetensors": b"other-lora" * 64,
    "README.md": b"# loras",
}
QWEN_REPO = {
    "config.json": b"{}",
    "generation_config.json": b"{}",
    "merges.txt": b"merges",
    "tokenizer.json": b"{}",
    "tokenizer_config.json": b"{}",
    "vocab.json": b"{}",
    "model-00001-of-00001.safetensors": b"qwen" * 64,
    "model.safetensors.index.json": b"{}",
    "pytorch_model.bin": b"pickle" * 64,
}
LTX_REPO = {
    "model_index.json": json.dumps({"_class_name": "LTX2Pipeline", "transformer": ["diffusers", "X"]}).encode(),
    "transformer/config.json": b"{}",
    "transformer/diffusion_pytorch_model.safetensors": b"ltx" * 64,
    "latent_upsampler/config.json": b"{}",
    "latent_upsampler/diffusion_pytorch_model.safetensors": b"up" * 64,
    "ltx-2-19b-distilled-lora-384.safetensors": b"distilled" * 64,
    "ltx-2-19b-dev.safetensors": b"single-file" * 64,
    "ltx-2-19b-dev-fp8.safetensors": b"single-file-fp8" * 64,
}


def _git_blob_sha1(data: bytes) -> str:
    return hashlib.sha1(f"blob {len(data)}\0".encode() + data, usedforsecurity=False).hexdigest()


def mirror_repo(cache: Path, repo: str, files: dict[str, bytes], commit: str, *, main: bool = True) -> None:
    """``repo`` at ``commit`` in the hub cache layout: snapshot files link to blobs named by their hash (sha256
    for LFS files, the git blob id for the rest), and ``refs/main`` names the commit."""
    root = cache / ("models--" + repo.replace("/", "--"))
    (root / "blobs").mkdir(parents=True, exist_ok=True)
    for path, data in files.items():
        lfs = path.endswith((".safetensors", ".bin", ".pth"))
        blob = root / "blobs" / (hashlib.sha256(data).hexdigest() if lfs else _git_blob_sha1(data))
        blob.write_bytes(data)
        link = root / "snapshots" / commit / path
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(blob, link.parent))
    if main:
        (root / "refs").mkdir(exist_ok=True)
        (root / "refs" / "main").write_text(commit)


@pytest.fixture(scope="module")
def catalog() -> Catalog:
    return load_catalog()


@pytest.fixture
def mirror(tmp_path: Path, catalog: Catalog) -> Path:
    cache = tmp_path / "hub-cache"
    mirror_repo(cache, "Wan-AI/Wan2.1-T2V-14B-Diffusers", WAN_REPO, WAN_COMMIT)
    mirror_repo(cache, "lightx2v/Wan2.1-Distill-Loras", LORA_REPO, LORA_COMMIT)
    mirror_repo(cache, "Qwen/Qwen2.5-7B-Instruct", QWEN_REPO, QWEN_COMMIT)
    ltx_pin = catalog.models["ltx-2"].revision  # the shipped pin: the mirror holds the repo at that commit
    assert ltx_pin is not None
    mirror_repo(cache, "Lightricks/LTX-2", LTX_REPO, ltx_pin, main=False)
    return cache


def _wan(catalog: Catalog) -> ModelSpec:
    """Wan 2.1 T2V 14B as shipped, with its main repo pinned at the mirror's commit (the LoRA unpinned)."""
    return catalog.models["wan2.1-t2v-14b"].model_copy(update={"revision": WAN_COMMIT})


def _pulled(folder: Path) -> list[str]:
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file() and p.name != MANIFEST)


def test_pull_copies_exactly_what_the_model_loads(catalog: Catalog, mirror: Path, tmp_path: Path) -> None:
    weights = tmp_path / "weights"
    pull(_wan(catalog), weights, from_cache=mirror, progress=lambda line: None)

    loaded = sorted(
        path
        for path in WAN_REPO
        if not path.startswith(("examples/", "Wan2.1_VAE"))
        and ".fp16." not in path
        and not path.endswith((".bin", ".index.fp16.json"))
    )
    assert _pulled(weights / "Wan-AI/Wan2.1-T2V-14B-Diffusers") == loaded
    assert _pulled(weights / "lightx2v/Wan2.1-Distill-Loras") == [
        "wan2.1_t2v_14b_lora_rank64_lightx2v_4step.safetensors"
    ]
    assert _pulled(weights / "Qwen/Qwen2.5-7B-Instruct") == sorted(p for p in QWEN_REPO if not p.endswith(".bin"))
    manifest = json.loads((weights / "Wan-AI/Wan2.1-T2V-14B-Diffusers" / MANIFEST).read_text())
    assert manifest["revision"] == WAN_COMMIT
    shard = "transformer/diffusion_pytorch_model-00001-of-00002.safetensors"
    assert manifest["files"][shard] == {
        "size": len(WAN_REPO[shard]),
        "sha256": hashlib.sha256(WAN_REPO[shard]).hexdigest(),
        "git_sha1": None,
    }
    assert manifest["files"]["vae/config.json"]["git_sha1"] == _git_blob_sha1(b"{}")
    assert verify(_wan(catalog), weights, progress=lambda line: None) == []


def test_ltx2_pulls_its_two_stage_files_and_no_single_file_checkpoint(
    catalog: Catalog, mirror: Path, tmp_path: Path
) -> None:
    weights = tmp_path / "weights"
    pull(catalog.models["ltx-2"], weights, from_cache=mirror, progress=lambda line: None)
    assert _pulled(weights / "Lightricks/LTX-2") == [
        "latent_upsampler/config.json",
        "latent_upsampler/diffusion_pytorch_model.safetensors",
        "ltx-2-19b-distilled-lora-384.safetensors",
        "model_index.json",
        "transformer/config.json",
        "transformer/diffusion_pytorch_model.safetensors",
    ]


def test_verify_names_what_is_missing_altered_or_not_pinned(catalog: Catalog, mirror: Path, tmp_path: Path) -> None:
    weights = tmp_path / "weights"
    spec = _wan(catalog)
    assert verify(spec, weights, progress=lambda line: None)[0].startswith(
        "Wan-AI/Wan2.1-T2V-14B-Diffusers: not pulled"
    )
    pull(spec, weights, from_cache=mirror, progress=lambda line: None)
    repo = weights / "Wan-AI/Wan2.1-T2V-14B-Diffusers"

    shard = repo / "transformer/diffusion_pytorch_model-00002-of-00002.safetensors"
    shard.write_bytes(b"X" + shard.read_bytes()[1:])  # same size, one byte altered
    (repo / "vae/config.json").unlink()
    problems = verify(spec, weights, progress=lambda line: None)
    assert problems == [
        "Wan-AI/Wan2.1-T2V-14B-Diffusers: transformer/diffusion_pytorch_model-00002-of-00002.safetensors: "
        "sha256 differs from the source's",
        "Wan-AI/Wan2.1-T2V-14B-Diffusers: vae/config.json: missing",
    ]
    assert verify(spec, weights, quick=True, progress=lambda line: None) == [
        "Wan-AI/Wan2.1-T2V-14B-Diffusers: vae/config.json: missing"
    ]
    repinned = spec.model_copy(update={"revision": "9" * 40})
    assert f"pulled at {WAN_COMMIT}, the catalog pins {'9' * 40}" in verify(repinned, weights, quick=True)[0]


def test_a_revision_the_mirror_lacks_is_refused(catalog: Catalog, mirror: Path, tmp_path: Path) -> None:
    spec = catalog.models["wan2.1-t2v-14b"].model_copy(update={"revision": "9" * 40})
    with pytest.raises(ModelLoadError, match=f"Wan-AI/Wan2.1-T2V-14B-Diffusers@{'9' * 40} is not in the mirror"):
        pull(spec, tmp_path / "weights", from_cache=mirror, progress=lambda line: None)


def test_tiny_models_are_built_not_pulled(catalog: Catalog) -> None:
    with pytest.raises(ModelLoadError, match="built offline"):
        needed(catalog.models["tiny-wan"])


def test_the_commands_pull_and_verify(mirror: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    weights = tmp_path / "weights"
    monkeypatch.setenv("GENWORKER_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("GENWORKER_MODELS__WEIGHTS_DIR", str(weights))
    runner = CliRunner()

    pulled = runner.invoke(app, ["weights", "pull", "ltx-2", "--from-cache", str(mirror)])
    assert pulled.exit_code == 0, pulled.output
    assert runner.invoke(app, ["weights", "verify", "ltx-2"]).exit_code == 0

    (weights / "Lightricks/LTX-2/ltx-2-19b-distilled-lora-384.safetensors").write_bytes(b"short")
    failed = runner.invoke(app, ["weights", "verify", "ltx-2"])
    assert failed.exit_code == 1
    assert "ltx-2-19b-distilled-lora-384.safetensors: 5 bytes, expected" in failed.output


@pytest.mark.parametrize("offline", [True, False], ids=["HF_HUB_OFFLINE", "refused"])
def test_a_hub_out_of_reach_is_one_line_naming_it_and_the_offline_way(tmp_path: Path, offline: bool) -> None:
    """No traceback of the hub client: the host it could not reach and ``--from-cache``, in one line."""
    import socket
    import subprocess
    import sys

    with socket.socket() as closed:  # a loopback port nothing listens on: the connection is refused
        closed.bind(("127.0.0.1", 0))
        endpoint = f"http://127.0.0.1:{closed.getsockname()[1]}"
    env = {k: v for k, v in os.environ.items() if k != "HF_HUB_OFFLINE"}
    env |= {
        "HF_ENDPOINT": endpoint,
        "GENWORKER_MODELS__WEIGHTS_DIR": str(tmp_path),
        "GENWORKER_DATA_DIR": str(tmp_path),
    }
    if offline:
        env["HF_HUB_OFFLINE"] = "1"
    result = subprocess.run(
        [str(Path(sys.executable).with_name("genworker")), "weights", "pull", "wan2.1-t2v-1.3b"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 1
    lines = (result.stdout + result.stderr).splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"genworker weights pull: cannot reach the hub at {endpoint} for Wan-AI/")
    assert lines[0].endswith("genworker weights pull wan2.1-t2v-1.3b --from-cache DIR")


# ---------------------------------------------------------------- weights that prove what they are (issue 46 item 3)
def test_a_dereferenced_mirror_is_hashed_from_its_bytes(catalog: Catalog, mirror: Path, tmp_path: Path) -> None:
    """A copy of the cache made with its links dereferenced names no hash: each file's sha256 comes from its
    bytes, so a shard overwritten with same-size garbage fails ``verify``."""
    import shutil

    flat = tmp_path / "flat-cache"
    shutil.copytree(mirror, flat, symlinks=False)
    weights = tmp_path / "weights"
    pull(_wan(catalog), weights, from_cache=flat, progress=lambda line: None)
    repo = weights / "Wan-AI/Wan2.1-T2V-14B-Diffusers"
    manifest = json.loads((repo / MANIFEST).read_text())
    assert {path: facts["sha256"] for path, facts in manifest["files"].items()} == {
        path: hashlib.sha256(WAN_REPO[path]).hexdigest() for path in manifest["files"]
    }
    shard = repo / "transformer/diffusion_pytorch_model-00001-of-00002.safetensors"
    shard.write_bytes(b"\0" * shard.stat().st_size)
    assert verify(_wan(catalog), weights, progress=lambda line: None) == [
        "Wan-AI/Wan2.1-T2V-14B-Diffusers: transformer/diffusion_pytorch_model-00001-of-00002.safetensors: "
        "sha256 differs from the source's"
    ]


def test_files_already_pulled_are_not_copied_again(catalog: Catalog, mirror: Path, tmp_path: Path) -> None:
    weights = tmp_path / "weights"
    pull(_wan(catalog), weights, from_cache=mirror, progress=lambda line: None)
    shard = weights / "Wan-AI/Wan2.1-T2V-14B-Diffusers/transformer/diffusion_pytorch_model-00002-of-00002.safetensors"
    shard.write_bytes(b"X" + shard.read_bytes()[1:])  # an interrupted or damaged copy: this one goes again
    lines: list[str] = []
    pull(_wan(catalog), weights, from_cache=mirror, progress=lines.append)
    copied = [line for line in lines if line.startswith("copy ")]
    assert copied == [f"copy Wan-AI/Wan2.1-T2V-14B-Diffusers/{shard.relative_to(shard.parents[1]).as_posix()}"]
    assert verify(_wan(catalog), weights, progress=lambda line: None) == []


def test_a_mirror_link_outside_the_mirror_is_refused(catalog: Catalog, mirror: Path, tmp_path: Path) -> None:
    outside = tmp_path / "elsewhere.safetensors"
    outside.write_bytes(b"not from the mirror")
    root = mirror / "models--Wan-AI--Wan2.1-T2V-14B-Diffusers"
    link = root / "snapshots" / WAN_COMMIT / "vae/diffusion_pytorch_model.safetensors"
    link.unlink()
    link.symlink_to(outside)
    weights = tmp_path / "weights"
    with pytest.raises(ModelLoadError, match=r"vae/diffusion_pytorch_model\.safetensors in the mirror links outside"):
        pull(_wan(catalog), weights, from_cache=mirror, progress=lambda line: None)
    assert not (weights / "Wan-AI/Wan2.1-T2V-14B-Diffusers/vae/diffusion_pytorch_model.safetensors").exists()


def test_a_manifest_path_outside_its_folder_is_refused(catalog: Catalog, mirror: Path, tmp_path: Path) -> None:
    weights = tmp_path / "weights"
    pull(_wan(catalog), weights, from_cache=mirror, progress=lambda line: None)
    repo = weights / "Wan-AI/Wan2.1-T2V-14B-Diffusers"
    secret = tmp_path / "secret.json"
    secret.write_bytes(b"{}")
    manifest = json.loads((repo / MANIFEST).read_text())
    escape = os.path.relpath(secret, repo)
    manifest["files"][escape] = {"size": 2, "sha256": hashlib.sha256(b"{}").hexdigest(), "git_sha1": None}
    (repo / MANIFEST).write_text(json.dumps(manifest))
    assert verify(_wan(catalog), weights, progress=lambda line: None) == [
        f"Wan-AI/Wan2.1-T2V-14B-Diffusers: {escape}: resolves outside {repo}"
    ]


@pytest.mark.parametrize("policy", ["refuse", "warn"])
def test_a_folder_pulled_under_another_pin_is_refused_at_load(
    catalog: Catalog, mirror: Path, tmp_path: Path, policy: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The worker holds a pulled folder to the catalog's pin when it loads the model, naming both commits; with
    ``models.weights_pin: warn`` it only logs it (and goes on to load)."""
    from foundation.settings.models import ModelRuntimeSettings
    from pipelines.runtime.registry import load_adapter

    weights = tmp_path / "weights"
    pull(_wan(catalog), weights, from_cache=mirror, progress=lambda line: None)
    repinned = _wan(catalog).model_copy(update={"revision": "9" * 40})
    runtime = ModelRuntimeSettings(device="cpu", weights_dir=str(weights), weights_pin=policy)
    stale = f"pulled at {WAN_COMMIT}, the catalog pins {'9' * 40}"
    with pytest.raises(ModelLoadError) as refused:
        load_adapter(repinned, runtime)
    if policy == "refuse":
        assert stale in str(refused.value)
    else:  # loaded past the pin, the fake weights fail in the loader itself
        assert stale not in str(refused.value)
        assert any(stale in record.getMessage() for record in caplog.records)


def test_a_half_copied_folder_is_refused_at_load(catalog: Catalog, mirror: Path, tmp_path: Path) -> None:
    from foundation.settings.models import ModelRuntimeSettings
    from pipelines.runtime.registry import load_adapter

    weights = tmp_path / "weights"
    pull(_wan(catalog), weights, from_cache=mirror, progress=lambda line: None)
    (weights / "Wan-AI/Wan2.1-T2V-14B-Diffusers/vae/diffusion_pytorch_model.safetensors").unlink()
    with pytest.raises(ModelLoadError, match=r"vae/diffusion_pytorch_model\.safetensors: missing"):
        load_adapter(_wan(catalog), ModelRuntimeSettings(device="cpu", weights_dir=str(weights)))


LTX25_COMMIT = "5" * 40
LTX25_REPO = {
    "model_index.json": json.dumps(
        {"_class_name": "LTX2Pipeline", "transformer": ["diffusers", "X"], "vae": ["diffusers", "Y"]}
    ).encode(),
    "transformer/config.json": b"{}",
    "transformer/diffusion_pytorch_model.safetensors": b"distilled-dit" * 64,
    "transformer_full/config.json": b"{}",
    "transformer_full/diffusion_pytorch_model.safetensors": b"full-dit" * 64,
    "vae/config.json": b"{}",
    "vae/diffusion_pytorch_model.safetensors": b"vae" * 64,
    "latent_upsampler/config.json": b"{}",
    "latent_upsampler/diffusion_pytorch_model.safetensors": b"up" * 64,
    "diffusion_decoder/config.json": b"{}",
    "diffusion_decoder/diffusion_pytorch_model.safetensors": b"decoder" * 64,
    "ltx-2.5-22b-distilled-lora-450-bf16.safetensors": b"lora-450" * 64,
}


def test_two_entries_of_one_repo_pull_their_own_transformers_and_both_verify(
    catalog: Catalog, mirror: Path, tmp_path: Path
) -> None:
    """ltx-2.5-dev loads the full model of LTX-2.5-Diffusers (``transformer_full/``) in place of the distilled one the
    index names: a pull of it never fetches ``transformer/`` (44 GB it would not read). Pulled beside ltx-2.5 (the
    distilled one, no LoRA), each keeps what the other pulled in the manifest: both verify."""
    mirror_repo(mirror, "Lightricks/LTX-2.5-Diffusers", LTX25_REPO, LTX25_COMMIT)
    dev, distilled = catalog.models["ltx-2.5-dev"], catalog.models["ltx-2.5"]
    only_dev = tmp_path / "only-dev"
    (folder,) = pull(dev, only_dev, from_cache=mirror, progress=lambda line: None)
    assert set(_pulled(folder)) == {p for p in LTX25_REPO if not p.startswith("transformer/")}
    assert verify(dev, only_dev) == []

    both = tmp_path / "both"
    pull(distilled, both, from_cache=mirror, progress=lambda line: None)
    pull(dev, both, from_cache=mirror, progress=lambda line: None)
    assert verify(distilled, both) == [] and verify(dev, both) == []
    assert set(_pulled(both / "Lightricks/LTX-2.5-Diffusers")) == set(LTX25_REPO)
