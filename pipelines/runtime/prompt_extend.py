"""Prompt extension: rewrite a short prompt into a detailed one, or fall back to the original.

Two methods, chosen by the catalog (``spec.prompt_extend.method``):
- ``chat_llm`` (Wan): a chat LLM named in the catalog (``AutoModelForCausalLM`` + its chat template), loaded
  lazily by the adapter and kept with it (``ChatLLM``), with the official system prompt of the entry's upstream
  task (``pipelines.families.system_prompts``); on a GPU it rests in host memory and visits the device per call;
- ``text_encoder`` (LTX-2.0): the pipeline's own Gemma-3 text encoder, through diffusers' ``enhance_prompt``
  with Lightricks' system prompt as diffusers ships it (``T2V_DEFAULT_SYSTEM_PROMPT``; for an image job
  ``I2V_DEFAULT_SYSTEM_PROMPT`` with the input image, which Gemma-3 sees).

Every call is bounded (``max_new_tokens``, ``max_time``) and seeded, without touching the global RNG the
caller sees. Adapters raise ``PromptExtendError`` on failure; ``extend_or_fallback`` is what the worker calls:
it never raises for an extension problem, it returns the original prompt with the reason instead. An
out-of-memory error is not an extension problem: it propagates, so the worker frees memory and retries.
"""

from __future__ import annotations

import contextlib
import logging
import re
import time
import unicodedata
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from foundation.core.contract import PromptExtension
from foundation.core.errors import FatalWorkerError, JobCanceled, is_out_of_memory, short_message
from pipelines.errors import PromptExtendError

if TYPE_CHECKING:
    from PIL.Image import Image

    from foundation.core.resolve import ResolvedJob
    from foundation.settings.models import ModelRuntimeSettings
    from pipelines.runtime.adapter import Adapter

__all__ = [
    "ChatLLM",
    "PromptExtendError",
    "extend_or_fallback",
    "finish_extension",
    "sanitize",
    "seeded_rng",
]

log = logging.getLogger("genworker.pipelines")

_SPACES = re.compile(r"\s+")
# Control, format, surrogate, private-use and unassigned characters, plus the replacement character
# that undecodable bytes become: random-weight models emit plenty of both.
_DROP_CATEGORIES = {"Cc", "Cf", "Cs", "Co", "Cn"}


def sanitize(text: str) -> str:
    """Printable text on one line: control and unassigned characters dropped, whitespace collapsed."""
    kept = []
    for ch in text:
        if ch.isspace():
            kept.append(" ")
        elif ch != "\ufffd" and unicodedata.category(ch) not in _DROP_CATEGORIES:
            kept.append(ch)
    return _SPACES.sub(" ", "".join(kept)).strip()


def finish_extension(raw: str, *, started: float, timeout_s: float) -> str:
    """Sanitize an adapter's output; raise when it is empty or the call ran to its time limit."""
    elapsed = time.perf_counter() - started
    if elapsed >= timeout_s:
        raise PromptExtendError(f"timed out after {elapsed:.2f} s (limit {timeout_s:g} s)")
    text = sanitize(raw)
    if not text:
        raise PromptExtendError("the model produced no usable text")
    return text


@contextlib.contextmanager
def seeded_rng(seed: int, device: str) -> Iterator[None]:
    """Seed torch for one sampling call and restore the caller's RNG state afterwards."""
    import torch

    devices: list[int] = []
    if device.startswith("cuda") and torch.cuda.is_available():
        devices = [torch.device(device).index or torch.cuda.current_device()]
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)
        yield


class ChatLLM:
    """A chat LLM (``AutoModelForCausalLM`` + tokenizer chat template) that rewrites prompts.

    On a CUDA device it rests on the CPU and visits the device only for the call (``offload``), as Wan's
    upstream ``QwenPromptExpander.extend`` does (``model.to(device)`` ... ``model.to("cpu")``): a 7B LLM
    (~15 GB in bf16) must not hold video-model memory between jobs.
    """

    def __init__(self, model: Any, tokenizer: Any, *, device: str, offload: bool) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.device = device
        self.offload = offload

    @classmethod
    def load(
        cls,
        ref: str,
        runtime: ModelRuntimeSettings,
        *,
        tiny: bool,
        device: str,
        dtype: str,
        revision: str | None = None,
    ) -> ChatLLM:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from pipelines.runtime.dtypes import torch_dtype
        from pipelines.runtime.registry import hub_revision, resolve_weights

        path = resolve_weights(ref, runtime, tiny=tiny)
        pinned = hub_revision(ref, path, revision)
        started = time.perf_counter()
        tokenizer = AutoTokenizer.from_pretrained(path, **pinned)
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch_dtype(dtype), **pinned).eval()
        offload = device.startswith("cuda")
        model.to("cpu" if offload else device)
        log.info("chat LLM loaded", extra={"llm": ref, "elapsed_ms": round(1000 * (time.perf_counter() - started))})
        return cls(model, tokenizer, device=device, offload=offload)

    def rewrite(self, system_prompt: str, prompt: str, *, max_new_tokens: int, timeout_s: float, seed: int) -> str:
        import torch

        messages = [{"role": "system", "content": system_prompt}, {"role": "user", "content": prompt}]
        inputs = self.tokenizer.apply_chat_template(
            messages, add_generation_prompt=True, return_tensors="pt", return_dict=True
        ).to(self.device)
        if self.offload:
            self.model.to(self.device)
        try:
            with torch.no_grad(), seeded_rng(seed, self.device):
                output = self.model.generate(
                    **inputs,
                    max_new_tokens=max_new_tokens,
                    # A real rewrite is never this short; it keeps random tiny models from stopping at once.
                    min_new_tokens=min(8, max_new_tokens),
                    max_time=timeout_s,
                    do_sample=True,
                    temperature=0.7,
                    top_p=0.9,
                    pad_token_id=self.tokenizer.pad_token_id,
                )
        finally:
            if self.offload:
                self.model.to("cpu")
        new_tokens = output[0, inputs["input_ids"].shape[1] :]
        return str(self.tokenizer.decode(new_tokens, skip_special_tokens=True))

    def unload(self) -> None:
        self.model = None
        self.tokenizer = None


def extend_or_fallback(
    adapter: Adapter, job: ResolvedJob, *, image: Image | None = None
) -> tuple[str, PromptExtension]:
    """The prompt to generate with and what happened: ``applied``, or ``fallback`` with the reason.

    ``image``: the input image of an ``image_to_video`` job (as ``denoise`` gets it), which the extension sees.

    Any failure of the extension itself (load, generation, timeout, empty output) falls back to the
    original prompt; only a cancel or a fatal worker error propagates.
    """
    spec = adapter.spec
    settings = spec.prompt_extend
    if settings is None:
        return job.prompt, PromptExtension(status="fallback", reason=f"{spec.id} has no prompt extension")
    try:
        conditioning = {"image": image} if image is not None else {}
        raw = adapter.extend_prompt(
            job.prompt,
            max_new_tokens=settings.max_new_tokens,
            timeout_s=settings.timeout_s,
            seed=job.seed,
            **conditioning,
        )
        text = sanitize(raw)[: spec.prompt_max_chars].strip()
        if not text:
            raise PromptExtendError("the model produced no usable text")
    except (JobCanceled, FatalWorkerError):
        raise
    except Exception as e:
        if is_out_of_memory(e):
            raise  # the worker's out-of-memory path (free, retry once), not a silent fallback
        reason = f"{type(e).__name__}: {short_message(e)}"
        log.warning("prompt extension fell back", extra={"model": spec.id, "reason": reason})
        return job.prompt, PromptExtension(status="fallback", reason=reason)
    return text, PromptExtension(status="applied")
