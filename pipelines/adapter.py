"""The adapter contract between the worker and a model family.

An adapter is loaded once (``load``) and then generates many jobs (``generate``). It never touches Redis,
S3 or HTTP. What it produces is ``worker.core.media.Media``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from pipelines.config import ModelRuntimeSettings
    from worker.core.catalog import ModelSpec
    from worker.core.media import Media, StepCallback
    from worker.core.resolve import ResolvedJob

__all__ = ["Adapter"]


class Adapter(Protocol):
    """A loaded model family. ``load`` once, then ``generate`` per job (deterministic per seed)."""

    spec: ModelSpec

    @classmethod
    def load(cls, spec: ModelSpec, runtime: ModelRuntimeSettings, *, device: str, dtype: str) -> Adapter: ...

    def generate(self, job: ResolvedJob, on_step: StepCallback) -> Media: ...

    def extend_prompt(self, prompt: str, *, max_new_tokens: int, timeout_s: float, seed: int) -> str:
        """Rewrite ``prompt`` with more detail (text encoder or chat LLM); raise on failure."""
        ...

    def unload(self) -> None:
        """Free the model's memory (host and device)."""
        ...
