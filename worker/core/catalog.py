"""The model catalog (``configs/models.yaml``): what can be generated, how, and at what rate.

The catalog is data. It is validated at load time and a bad file fails with one message that names the
file, the model entry and the field, so an operator fixes it before any job runs.
"""

from __future__ import annotations

import difflib
from decimal import Decimal
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator, model_validator

from worker.core.errors import GenworkerError
from worker.core.sizes import RATIOS, SIZE_TABLE

__all__ = [
    "FAMILY_OPTIONS",
    "Catalog",
    "CatalogError",
    "FrameRule",
    "ModeSpec",
    "ModelSpec",
    "PromptExtendSpec",
    "Rates",
    "VariantSpec",
    "default_catalog_path",
    "load_catalog",
]

_Forbid = ConfigDict(extra="forbid", frozen=True)
PositiveDecimal = Annotated[Decimal, Field(ge=0, max_digits=12, decimal_places=6)]

# The options each family's adapter accepts in a variant's ``pipeline_kwargs``. Kept here as data so the
# catalog refuses a typo at load without importing the adapters; tests/pipelines/test_options.py holds
# every adapter to this table, so the two cannot drift.
FAMILY_OPTIONS: dict[str, frozenset[str]] = {
    "wan": frozenset({"boundary_ratio", "max_sequence_length"}),
    "ltx2": frozenset(
        {
            "audio_guidance_rescale",
            "audio_guidance_scale",
            "audio_modality_scale",
            "audio_stg_scale",
            "decode_noise_scale",
            "decode_timestep",
            "guidance_rescale",
            "max_sequence_length",
            "modality_scale",
            "spatio_temporal_guidance_blocks",
            "stg_scale",
            "use_cross_timestep",
        }
    ),
}


class CatalogError(GenworkerError, ValueError):
    """A catalog file that cannot be used; the message names file, entry and field."""


class FrameRule(BaseModel):
    """Valid generated frame counts are ``multiple * k + offset`` (Wan: 4k+1, LTX-2: 8k+1)."""

    model_config = _Forbid

    multiple: Annotated[int, Field(ge=1, le=64)]
    offset: Annotated[int, Field(ge=0, le=64)] = 1


class VariantSpec(BaseModel):
    """A recipe: steps and guidance, plus family-specific pipeline knobs in ``pipeline_kwargs``."""

    model_config = _Forbid

    steps: Annotated[int, Field(ge=1, le=1000)]
    guidance_scale: Annotated[float, Field(ge=0.0, le=50.0)]
    guidance_scale_2: Annotated[float, Field(ge=0.0, le=50.0)] | None = None
    flow_shift: Annotated[float, Field(gt=0.0, le=100.0)] | None = None
    # Price multiplier relative to the model's base rates (a cheaper recipe may cost less).
    rate_multiplier: PositiveDecimal = Decimal("1")
    # Family-specific options for the pipeline call (e.g. LTX-2's stg_scale): keys of FAMILY_OPTIONS[family],
    # checked by ModelSpec, which knows the family.
    pipeline_kwargs: dict[str, Any] = Field(default_factory=dict)


class ModeSpec(BaseModel):
    model_config = _Forbid

    variants: dict[str, VariantSpec]

    @model_validator(mode="after")
    def _has_variants(self) -> ModeSpec:
        if not self.variants:
            raise ValueError("a mode needs at least one variant")
        return self


class PromptExtendSpec(BaseModel):
    """How ``prompt_extend`` works for a model: its own text encoder, or a chat LLM from the catalog."""

    model_config = _Forbid

    method: Literal["text_encoder", "chat_llm"]
    llm: str | None = None  # hub id or local path of the chat LLM (method chat_llm)
    max_new_tokens: Annotated[int, Field(ge=1, le=4096)] = 256
    timeout_s: Annotated[float, Field(gt=0, le=600)] = 30.0

    @model_validator(mode="after")
    def _llm_named(self) -> PromptExtendSpec:
        if self.method == "chat_llm" and not self.llm:
            raise ValueError("method chat_llm needs 'llm' (hub id or local path)")
        return self


class Rates(BaseModel):
    """Customer rates: USD per output second, by resolution label, plus a per-second audio surcharge."""

    model_config = _Forbid

    currency: Literal["USD"] = "USD"
    per_second: dict[str, PositiveDecimal]
    audio_per_second: PositiveDecimal = Decimal("0")


class ModelSpec(BaseModel):
    model_config = _Forbid

    id: Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9._-]{0,63}$")]
    display_name: str
    family: Literal["wan", "ltx2"]
    adapter: Annotated[str, Field(pattern=r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")]
    weights: str  # hub id or local path; a relative path is resolved against the tiny-model dir
    tiny: bool = False  # built offline by scripts/make_tiny_models.py
    fps: Annotated[int, Field(ge=1, le=120)]
    frame_rule: FrameRule
    stride: Annotated[int, Field(ge=2, le=256)]
    resolutions: list[str]
    ratios: list[str]
    durations: list[Annotated[int, Field(ge=1, le=120)]]
    defaults: dict[str, Any]
    audio: bool = False
    prompt_extend: PromptExtendSpec | None = None
    prompt_max_chars: Annotated[int, Field(ge=1, le=100_000)] = 2000
    negative_prompt: str = ""
    max_job_seconds: Annotated[float, Field(gt=0)] = 3600.0
    # Operator sizing hints: resident GPU memory and public per-job GPU seconds at the default size.
    gpu_memory_gb: Annotated[float, Field(ge=0)] = 0.0
    est_gpu_seconds_per_job: Annotated[float, Field(ge=0)] = 0.0
    dtype: Literal["float32", "bfloat16", "float16"] = "bfloat16"
    rates: Rates
    modes: dict[str, ModeSpec]

    @field_validator("modes")
    @classmethod
    def _known_options(cls, modes: dict[str, ModeSpec], info: ValidationInfo) -> dict[str, ModeSpec]:
        """Every ``pipeline_kwargs`` key must be an option of the model's family (a typo fails at load)."""
        family = info.data.get("family")
        if family is None:  # the family itself failed validation; that error is the one to report
            return modes
        allowed = FAMILY_OPTIONS[family]
        for mode_name, mode in modes.items():
            for variant_name, variant in mode.variants.items():
                for key in variant.pipeline_kwargs:
                    if key not in allowed:
                        where = f"{mode_name}.variants.{variant_name}.pipeline_kwargs"
                        raise ValueError(f"{where}: {_unknown_option(key, family, allowed)}")
        return modes

    @model_validator(mode="after")
    def _consistent(self) -> ModelSpec:
        for label in self.resolutions:
            if label not in SIZE_TABLE:
                raise ValueError(f"resolution {label!r} is not in the size table {sorted(SIZE_TABLE)}")
            if label not in self.rates.per_second:
                raise ValueError(f"rates.per_second has no rate for resolution {label!r}")
        for ratio in self.ratios:
            if ratio not in RATIOS:
                raise ValueError(f"ratio {ratio!r} is not one of {list(RATIOS)}")
        if not (self.resolutions and self.ratios and self.durations and self.modes):
            raise ValueError("resolutions, ratios, durations and modes must not be empty")
        allowed_defaults = {"resolution", "ratio", "duration_seconds", "audio", "prompt_extend"}
        unknown = set(self.defaults) - allowed_defaults
        if unknown:
            raise ValueError(f"defaults has unknown keys {sorted(unknown)}")
        if self.defaults.get("resolution") not in self.resolutions:
            raise ValueError("defaults.resolution must be one of resolutions")
        if self.defaults.get("ratio") not in self.ratios:
            raise ValueError("defaults.ratio must be one of ratios")
        if self.defaults.get("duration_seconds") not in self.durations:
            raise ValueError("defaults.duration_seconds must be one of durations")
        if self.defaults.get("audio", False) and not self.audio:
            raise ValueError("defaults.audio is true but the model has no audio")
        if self.defaults.get("prompt_extend", False) and self.prompt_extend is None:
            raise ValueError("defaults.prompt_extend is true but the model has no prompt_extend")
        return self


class Catalog(BaseModel):
    model_config = _Forbid

    models: dict[str, ModelSpec]
    source: str = "<memory>"

    def get(self, model_id: str) -> ModelSpec | None:
        return self.models.get(model_id)


def _unknown_option(key: str, family: str, allowed: frozenset[str]) -> str:
    close = difflib.get_close_matches(key, allowed, n=1)
    hint = f"did you mean {close[0]!r}? " if close else ""
    return f"unknown key {key!r} for family {family!r} ({hint}allowed: {', '.join(sorted(allowed))})"


def default_catalog_path() -> Path:
    return Path(__file__).resolve().parents[2] / "configs" / "models.yaml"


def _field_path(loc: tuple[int | str, ...]) -> str:
    return ".".join(str(p) for p in loc) or "<root>"


def load_catalog(path: str | Path | None = None) -> Catalog:
    """Load and validate a catalog file; raise ``CatalogError`` naming file, entry and field."""
    path = Path(path) if path is not None else default_catalog_path()
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as e:
        raise CatalogError(f"{path}: cannot read catalog: {e}") from e
    if not isinstance(raw, dict) or not isinstance(raw.get("models"), list):
        raise CatalogError(f"{path}: expected a mapping with a 'models' list")
    # Top-level keys other than 'models' must be YAML anchors' holders named 'x-...'.
    stray = [k for k in raw if k != "models" and not str(k).startswith("x-")]
    if stray:
        raise CatalogError(f"{path}: unknown top-level keys {stray} (only 'models' and 'x-*' anchors)")
    models: dict[str, ModelSpec] = {}
    for index, entry in enumerate(raw["models"]):
        name = entry.get("id", f"#{index}") if isinstance(entry, dict) else f"#{index}"
        try:
            spec = ModelSpec.model_validate(entry)
        except ValidationError as e:
            first = e.errors()[0]
            raise CatalogError(
                f"{path}: model {name!r}: field {_field_path(first['loc'])!r}: {first['msg']}"
                + (f" (and {e.error_count() - 1} more)" if e.error_count() > 1 else "")
            ) from e
        if spec.id in models:
            raise CatalogError(f"{path}: model {spec.id!r}: field 'id': duplicate model id")
        models[spec.id] = spec
    if not models:
        raise CatalogError(f"{path}: the catalog lists no models")
    return Catalog(models=models, source=str(path))
