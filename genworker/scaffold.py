"""``genworker pipeline new NAME --from-diffusers CLASS``: the files a new generic family starts from.

Reads the diffusers pipeline class (its constructor's components, its call's keywords, whether it decodes with
a method of its own or carries a ``guider``) and writes, into ``OUT/NAME/``:

- ``catalog.yaml``: a catalog of one tiny entry (``tiny-NAME``) for the generic adapter, valid once its recipe is
  filled in (the ``FILL-ME`` values), plus the real entry to copy into ``configs/models.yaml`` as a comment;
- ``tiny_NAME.py``: a tiny-model builder, one explicit constructor call per component with configs shrunk the
  way diffusers' own fast tests shrink them (``pipelines.tiny.generic.SHRUNK_COMPONENTS``);
- ``test_NAME.py``: the family through the shared checks (``tests/pipelines/family_checks.py``).

The contributor fills in the recipe and its sources, runs the test, then merges: the entries into
``configs/models.yaml``, the builder into ``pipelines/tiny/generic.py`` (``GENERIC_BUILDERS``), the test into
``tests/pipelines/`` (docs/adding-a-pipeline.md).
"""

from __future__ import annotations

import inspect
import re
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from genworker.errors import ScaffoldError

__all__ = ["RECIPE_PLACEHOLDER", "Family", "ScaffoldError", "inspect_pipeline", "write_scaffold"]

RECIPE_PLACEHOLDER = "FILL-ME"
_NAME = re.compile(r"^[a-z][a-z0-9-]{0,40}$")


@dataclass(frozen=True)
class Family:
    """What the scaffold read from a diffusers pipeline class."""

    pipeline: str
    components: dict[str, str]  # constructor argument -> the component class the builder instantiates
    modules: list[str]  # components that hold weights (a runtime profile may give them a dtype)
    decode_method: str | None  # "decode_latents" when the pipeline has one, else None (VAE scaling factor)
    guider: bool
    step_callback: bool


def _classes(annotation: Any) -> list[type]:
    """The classes an ``__init__`` annotation names (``A | B`` gives both, in order)."""
    args = typing.get_args(annotation)
    found = [a for a in args if isinstance(a, type)] if args else [annotation] if isinstance(annotation, type) else []
    return [c for c in found if c is not type(None)]


def inspect_pipeline(name: str) -> Family:
    """Read ``diffusers.<name>``; refuse a class whose components the shrink table does not cover."""
    import diffusers
    import torch

    from pipelines.tiny.generic import SHRUNK_COMPONENTS, SHRUNK_TEXT

    cls: Any = getattr(diffusers, name, None)
    if not isinstance(cls, type) or not hasattr(cls, "from_pretrained"):
        raise ScaffoldError(f"diffusers {diffusers.__version__} has no pipeline class {name!r}")
    init = cls.__dict__.get("__init__")  # every diffusers pipeline declares its components in its own __init__
    if init is None:
        raise ScaffoldError(f"{name} declares no __init__ of its own: not a diffusers pipeline class")
    hints = typing.get_type_hints(init)
    components: dict[str, str] = {}
    modules: list[str] = []
    missing: list[str] = []
    for param in list(inspect.signature(init).parameters)[1:]:
        options = _classes(hints.get(param))
        known = [c for c in options if c.__name__ in SHRUNK_COMPONENTS or c.__name__ in SHRUNK_TEXT]
        if not known:
            missing.append(f"{param} ({' | '.join(c.__name__ for c in options) or 'unannotated'})")
            continue
        components[param] = known[0].__name__
        if issubclass(known[0], torch.nn.Module):
            modules.append(param)
    if missing:
        raise ScaffoldError(
            f"{name}: no shrunk config for {', '.join(missing)}: add one to SHRUNK_COMPONENTS in "
            "pipelines/tiny/generic.py (copy diffusers' get_dummy_components for that class)"
        )
    call = set(inspect.signature(cls.__call__).parameters)
    return Family(
        pipeline=name,
        components=components,
        modules=modules,
        decode_method="decode_latents" if callable(getattr(cls, "decode_latents", None)) else None,
        guider="guider" in components,
        step_callback="callback_on_step_end" in call,
    )


def write_scaffold(name: str, pipeline: str, out_dir: Path) -> list[Path]:
    """Write the three files for family ``name`` under ``out_dir/name``; never overwrite an existing one."""
    if not _NAME.match(name):
        raise ScaffoldError(f"family name {name!r}: lowercase letters, digits and '-', starting with a letter")
    family = inspect_pipeline(pipeline)
    folder = out_dir / name
    module = name.replace("-", "_")
    files = {
        folder / "catalog.yaml": _catalog(name, family),
        folder / f"tiny_{module}.py": _builder(name, family),
        folder / f"test_{module}.py": _test(name, module),
    }
    existing = [str(p) for p in files if p.exists()]
    if existing:
        raise ScaffoldError(f"refusing to overwrite {', '.join(existing)}")
    folder.mkdir(parents=True, exist_ok=True)
    for path, text in files.items():
        path.write_text(text, encoding="utf-8")
    return list(files)


def _catalog(name: str, family: Family) -> str:
    decode = f"{{kind: method, method: {family.decode_method}}}" if family.decode_method else "{kind: scaling_factor}"
    block = "\n".join(
        [
            f"      pipeline: {family.pipeline}",
            f"      guidance: {'guider' if family.guider else 'argument'}",
            f"      components: [{', '.join(family.modules)}]",
            "      denoisers: [transformer]",
            "      attention_mask: false  # true if its transformer masks text tokens (refuses flash/sage kernels)",
            f"      decode: {decode}",
        ]
    )
    fill = RECIPE_PLACEHOLDER
    return f"""# Written by `genworker pipeline new {name} --from-diffusers {family.pipeline}`.
# 1. Fill in the recipe and frame rule ({fill}) with the official values; cite each source next to it.
# 2. Run from the repository root:
#    .venv/bin/python -m pytest <this folder>/test_{name.replace("-", "_")}.py -c pyproject.toml --rootdir .
# 3. Merge: this entry and the real one (below, commented) into configs/models.yaml.
models:
  - id: tiny-{name}
    display_name: Tiny {family.pipeline} (random weights, CPU)
    family: diffusers
    adapter: pipelines.families.generic:DiffusersTextToVideo
    diffusers:
{block}
    weights: tiny-{name}
    tiny: true
    fps: 4
    # Frames the VAE decodes exactly: 4k+1 for a 4x temporal VAE; 8k+1 when it needs an odd latent count (CogVideoX).
    frame_rule: {{multiple: {fill}, offset: 1}}
    stride: 16  # the VAE's spatial compression x the transformer's patch
    resolutions: ["144p"]
    ratios: ["16:9"]
    durations: [1]
    defaults: {{resolution: "144p", ratio: "16:9", duration_seconds: 1, audio: false, prompt_extend: false}}
    audio: false
    max_job_seconds: 300
    dtype: float32
    rates: {{per_second: {{"144p": "0.01"}}}}
    modes:
      text_to_video:
        variants:
          # The official recipe at tiny scale: 2 steps, the real guidance and shift.
          standard: {{steps: 2, guidance_scale: {fill}}}
          fast: {{steps: 2, guidance_scale: 1.0}}
# The real entry (copy into configs/models.yaml with the tiny one):
#  - id: {name}
#    family: diffusers
#    adapter: pipelines.families.generic:DiffusersTextToVideo
#    diffusers: (the block above)
#    weights: <hub id>   revision: <commit>
#    fps / frame_rule / stride / resolutions / durations: the model card's
#    runtime: {{dtypes: {{...}}, offload: none, vae_tiling: true, notes: "..."}}
#    modes: text_to_video: variants: standard: {{steps: <official>, guidance_scale: <official>}}  # [source]
"""


def _builder(name: str, family: Family) -> str:
    from pipelines.tiny.generic import SHRUNK_COMPONENTS, SHRUNK_TEXT

    imports = sorted({c for c in family.components.values() if c in SHRUNK_COMPONENTS} | {family.pipeline})
    lines = []
    for seed, (param, cls_name) in enumerate(family.components.items(), start=50):
        if cls_name in SHRUNK_TEXT:
            lines.append(f"    {param} = {SHRUNK_TEXT[cls_name]}")
            continue
        kwargs = SHRUNK_COMPONENTS[cls_name]
        args = "\n" + "".join(f"        {k}={v!r},\n" for k, v in kwargs.items()) + "    " if kwargs else ""
        lines.append(f"    torch.manual_seed({seed})\n    {param} = {cls_name}({args})")
    body = "\n".join(lines)
    call = "".join(f"        {p}={p},\n" for p in family.components)
    return f'''"""Tiny random-weight {family.pipeline} for tests (`genworker pipeline new {name}`).

Configs shrunk as diffusers' fast tests shrink them (pipelines/tiny/generic.py SHRUNK_COMPONENTS); VAEs keep the
real compression. Seeded before each component: builds are byte-identical.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from diffusers import {", ".join(imports)}

from pipelines.tiny.builders import BUILDER_VERSION, MARKER
from pipelines.tiny.generic import byte_t5

NAME = "tiny-{name}"


def build(out: Path) -> None:
    """Write the tiny pipeline to ``out`` (with the complete-build marker)."""
{body}
    pipe = {family.pipeline}(
{call}    )
    pipe.save_pretrained(out)
    marker = {{"name": NAME, "builder_version": BUILDER_VERSION}}
    (out / MARKER).write_text(json.dumps(marker, indent=2) + "\\n", encoding="utf-8")
'''


def _test(name: str, module: str) -> str:
    return f'''"""tiny-{name} through the shared checks: every offered shape through `genworker generate`'s path,
seed determinism, cancel within one step (`genworker pipeline new {name}`)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from pipelines.runtime.adapter import Adapter
from foundation.settings.models import ModelRuntimeSettings
from pipelines.runtime.registry import load_adapter
from tests.pipelines.family_checks import (
    check_cancel_within_one_step,
    check_offered_outputs,
    check_seed_determinism,
    request,
)
from foundation.core.catalog import ModelSpec, load_catalog
from foundation.core.resolve import ResolvedJob, resolve
from foundation.settings import Settings

HERE = Path(__file__).resolve().parent
MODEL = "tiny-{name}"


@pytest.fixture(scope="module")
def settings(tmp_path_factory: pytest.TempPathFactory) -> Settings:
    spec = importlib.util.spec_from_file_location("tiny_{module}", HERE / "tiny_{module}.py")
    assert spec is not None and spec.loader is not None
    builder = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(builder)
    models = tmp_path_factory.mktemp("models")
    builder.build(models / MODEL)
    return Settings(
        data_dir=str(tmp_path_factory.mktemp("data")),
        catalog_path=str(HERE / "catalog.yaml"),
        models=ModelRuntimeSettings(device="cpu", tiny_models_dir=str(models)),
        worker={{"build_tiny_models": False}},
    )


@pytest.fixture(scope="module")
def spec(settings: Settings) -> ModelSpec:
    return load_catalog(settings.catalog_path).models[MODEL]


@pytest.fixture(scope="module")
def adapter(settings: Settings, spec: ModelSpec) -> Adapter:
    return load_adapter(spec, settings.models)


def _job(settings: Settings, variant: str) -> ResolvedJob:
    job, _hold = resolve(request(MODEL, variant=variant), load_catalog(settings.catalog_path))
    return job


def test_every_offered_shape_is_exact(settings: Settings, spec: ModelSpec, tmp_path: Path) -> None:
    check_offered_outputs(settings, spec, tmp_path)


def test_same_seed_same_latents(adapter: Adapter, settings: Settings) -> None:
    check_seed_determinism(adapter, _job(settings, "fast"))


def test_cancel_stops_within_one_step(adapter: Adapter, settings: Settings) -> None:
    transformer = adapter.pipe.transformer  # type: ignore[attr-defined]
    check_cancel_within_one_step(adapter, _job(settings, "standard"), transformer)
'''
