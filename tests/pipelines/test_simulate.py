"""The full-size simulation (``genworker simulate``): one job per family at full size under fake tensors, through
the production adapters assembled as ``load`` assembles them, against the memory plan; and its parts."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from foundation.core.catalog import Catalog
from genworker.simulate import SHORT, plan_phases, problems
from pipelines.planning.fake_runtime import (
    HostBoundary,
    fake_mode,
    fake_safe_moves,
    integer_indices,
    is_fake,
    real_outputs,
)
from pipelines.planning.op_stats import OpRecorder, cpu_flash_flops
from pipelines.simulation.simulate import JobResult, sim_jobs, simulate_model


def test_cpu_flash_attention_counts_its_two_matmuls() -> None:
    """FlopCounterMode alone counts CPU flash SDPA as 0; with the registered formula it counts 4 B H Lq Lk d."""
    from torch.utils.flop_counter import FlopCounterMode

    q, k, v = torch.randn(1, 2, 64, 16), torch.randn(1, 2, 32, 16), torch.randn(1, 2, 32, 16)
    cpu_flash = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
    with FlopCounterMode(display=False, custom_mapping={cpu_flash: cpu_flash_flops}) as counter:
        torch.nn.functional.scaled_dot_product_attention(q, k, v)
    assert counter.get_total_flops() == 4 * 1 * 2 * 64 * 32 * 16


def test_fake_modules_move_and_cast_without_swapping_and_stay_tied() -> None:
    with fake_mode():
        model = torch.nn.Sequential(torch.nn.Embedding(8, 4), torch.nn.Linear(4, 8, bias=False))
    model[1].weight = model[0].weight  # tied, as shared embeddings are
    with fake_safe_moves():
        model.to("cpu")
        model.to(torch.bfloat16)
    assert is_fake(model[0].weight) and model[0].weight.dtype == torch.bfloat16
    assert model[1].weight is model[0].weight


def test_a_real_boolean_mask_indexes_a_fake_tensor_by_its_positions() -> None:
    mask = torch.tensor([True, False, True, True])
    assert [i.tolist() for i in integer_indices([mask]) or []] == [[0, 2, 3]]
    with fake_mode():
        values = torch.empty(4, 5)
    with OpRecorder().recording():
        picked = values[mask]
    assert picked.shape == (3, 5)


def test_live_bytes_count_new_storages_not_views_and_free_them() -> None:
    with fake_mode():
        weight = torch.empty(1000, 1000)
    recorder = OpRecorder()
    with recorder.recording():
        recorder.phase = "denoise"
        transposed = weight.t()  # a view of a weight: no new memory
        product = transposed @ torch.ones(1000, 10)
        del product
        recorder.phase = "decode"
        kept = weight.sum(dim=0)
    assert recorder.peaks["denoise"] == 2 * 1000 * 10 * 4  # the ones and the product; the view is free
    assert recorder.peaks["decode"] == 1000 * 4
    assert kept.shape == (1000,)


def test_frames_for_the_host_are_recorded_as_shapes() -> None:
    with fake_mode():
        waveform = torch.empty(2, 480, dtype=torch.bfloat16)
    with HostBoundary() as host:
        samples = waveform.float().numpy()
    assert host.shapes == [(2, 480)] and samples.shape == (2, 480)


def test_an_encoders_fake_output_is_made_real_for_a_branch_on_its_values() -> None:
    """HunyuanVideo 1.5's transformer tells a text job by ``torch.all(image_embeds == 0)``: a fake image encoder's
    output cannot answer that; under ``real_outputs`` it is real, nonzero, of its shape and dtype."""
    with fake_mode():
        encoder = torch.nn.Linear(4, 6, dtype=torch.bfloat16)
    image = torch.ones(2, 4, dtype=torch.bfloat16)
    with OpRecorder().recording():
        fake_out = encoder(image)
        with pytest.raises(RuntimeError, match=r"local_scalar_dense"):  # torch's DataDependentOutputException
            bool(torch.all(fake_out == 0))
        with real_outputs(encoder):
            out = encoder(image)
        assert not is_fake(out) and out.shape == (2, 6) and out.dtype == torch.bfloat16
        assert not bool(torch.all(out == 0))
        assert is_fake(encoder(image))  # the hook is gone outside


def test_the_random_assembly_runs_hunyuanvideos_production_attention(catalog: Catalog) -> None:
    """The bench and the simulation assemble through the adapter's own ``assemble``: HunyuanVideo 1.5 runs the
    key-padding processor that ``load`` puts in, not diffusers' dense-mask one."""
    from pipelines.families.hunyuan15 import KeyPaddingAttnProcessor
    from pipelines.simulation.random_pipelines import random_adapter

    model = random_adapter(catalog.models["hunyuanvideo-1.5-480p"], device="cpu", variants=[], scale="tiny")
    processors = model.adapter.pipe.transformer.attn_processors.values()
    joint = [p for p in processors if isinstance(p, KeyPaddingAttnProcessor.replaces)]
    assert joint and all(type(p) is KeyPaddingAttnProcessor for p in joint)


def test_random_builds_tie_shared_embeddings(catalog: Catalog) -> None:
    from pipelines.planning.random_weights import arch_entries, build_random

    entry = arch_entries("wan2.1-t2v-14b")["text_encoder"]
    encoder = build_random(entry, device="cpu", dtype="bfloat16", seed=0, fake=True)
    assert encoder.shared.weight is encoder.encoder.embed_tokens.weight
    assert sum(p.numel() for p in encoder.parameters()) == pytest.approx(5.68e9, rel=0.01)


def _short_results(catalog: Catalog, short: dict[str, tuple[str, list[tuple[str, str]]]]) -> list[JobResult]:
    results = []
    for model, (resolution, pairs) in short.items():
        spec = catalog.models[model]
        jobs = [j for j in sim_jobs(spec, resolution=resolution) if (j.mode, j.variant) in pairs]
        for result in simulate_model(spec, jobs, decode=False):  # decodes are minutes each: make simulate
            result.plan_gb = plan_phases(spec, result)
            results.append(result)
    return results


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_one_job_per_family_runs_at_full_size_within_the_plan(catalog: Catalog) -> None:
    """Wan 2.1 14B, TI2V-5B in both modes (the second mode once cast its shared modules to float32), LTX-2
    image-to-video (two stages), LTX-2.5 (its Gemma-4 encoder, the ancestral stage 1) and HunyuanVideo 1.5 in both
    modes (the image one reads its SigLIP embeddings' values), prompt encode and denoise at full size: no failure,
    no dtype change, no tensor of 2^31 elements, the plan at most 10 % under either phase, attention counted."""
    _assert_clean(_short_results(catalog, SHORT))


def test_one_job_at_full_size_within_the_plan(catalog: Catalog) -> None:
    """make test's short version of the test above (which make test-extended runs): Wan 2.1 1.3B at 480p, prompt
    encode and denoise at full size under fake tensors, clean and within the plan."""
    results = _short_results(catalog, {"wan2.1-t2v-1.3b": ("480p", [("text_to_video", "standard")])})
    assert len(results) == 1
    _assert_clean(results)


def _assert_clean(results: list[JobResult]) -> None:
    assert [p for r in results for p in problems(r)] == []
    for result in results:
        assert result.forwards and all(f.attention > 0 for f in result.forwards), result.job.label
        assert set(result.activation_bytes) >= {"encode", "denoise"}, result.job.label


def test_stored_figures_come_back_in_the_catalogs_order(tmp_path: Path) -> None:
    """``--from-json`` merges the sweeps of several processes: the tables list models in the catalog's order,
    whichever file each came from, with the plan recomputed beside each."""
    import json
    from dataclasses import asdict

    from typer.testing import CliRunner

    from genworker.cli import app
    from pipelines.simulation.simulate import SimJob

    def stored(model: str, mode: str = "text_to_video") -> dict[str, object]:
        job = SimJob(model, mode, "fast", "480p", "16:9", 5)
        result = JobResult(job, width=832, height=480, frames=81, weight_bytes=10**9)
        result.activation_bytes = {"encode": 1, "denoise": 2, "decode": 3}
        return asdict(result)

    later, earlier = tmp_path / "b.json", tmp_path / "a.json"
    later.write_text(json.dumps([stored("wan2.1-i2v-14b-480p", "image_to_video")]), encoding="utf-8")
    earlier.write_text(json.dumps([stored("wan2.1-t2v-1.3b")]), encoding="utf-8")
    doc = tmp_path / "gpu.md"
    doc.write_text("<!-- simulate:memory -->\nold\n<!-- /simulate:memory -->\n", encoding="utf-8")
    args = ["simulate", "--from-json", str(later), "--from-json", str(earlier), "--markdown", str(doc)]
    result = CliRunner().invoke(app, args)
    rows = [line for line in doc.read_text(encoding="utf-8").splitlines() if line.startswith("| `")]
    assert [row.split("`")[1] for row in rows] == ["wan2.1-t2v-1.3b", "wan2.1-i2v-14b-480p"], result.output
    assert "old" not in doc.read_text(encoding="utf-8")


def test_the_sweep_shares_models_among_processes_with_each_vae_in_one(catalog: Catalog) -> None:
    """``--jobs N``: models that share a VAE stay in one process (its decodes are computed once), the shares
    about even, every model once."""
    from genworker.simulate import shares
    from pipelines.planning.random_weights import arch_entries

    specs = [s for s in catalog.models.values() if not s.tiny]
    two = shares(specs, 2)
    assert sorted(s.id for share in two for s in share) == sorted(s.id for s in specs)
    assert len(two) == 2 and abs(len(two[0]) - len(two[1])) <= 2
    home: dict[str, int] = {}
    for i, share in enumerate(two):
        for spec in share:
            vae = str(sorted(arch_entries(spec.id)["vae"].items()))
            assert home.setdefault(vae, i) == i, spec.id
    assert len(shares(specs, 99)) == len(home)  # never more processes than VAEs
