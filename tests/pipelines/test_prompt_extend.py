"""Prompt extension: both methods through the tiny models, the used prompt, and the fallbacks."""

from __future__ import annotations

import pytest

from pipelines.adapter import Adapter
from pipelines.cache import ModelCache
from pipelines.config import ModelRuntimeSettings
from pipelines.ltx2 import LTX2TextToVideo
from pipelines.prompt_extend import PromptExtendError, extend_or_fallback, sanitize
from pipelines.wan import WanTextToVideo
from tests.pipelines.conftest import MakeJob
from worker.core.catalog import Catalog, PromptExtendSpec

PROMPT = "a lighthouse in a storm"


@pytest.fixture(scope="module")
def adapters(model_cache: ModelCache, catalog: Catalog) -> dict[str, Adapter]:
    return {model: model_cache.get(catalog.models[model]) for model in ("tiny-wan", "tiny-ltx2")}


@pytest.mark.parametrize("model", ["tiny-wan", "tiny-ltx2"])
def test_extension_returns_the_used_prompt_seeded(adapters: dict[str, Adapter], make_job: MakeJob, model: str) -> None:
    import torch

    adapter = adapters[model]
    job = make_job(model, prompt=PROMPT, prompt_extend=True, seed=4)
    rng_before = torch.random.get_rng_state()
    used, extension = extend_or_fallback(adapter, job)
    assert extension.status == "applied" and extension.reason is None
    assert used and used != PROMPT
    assert used == sanitize(used)  # printable, one line, no control characters
    assert len(used) <= adapter.spec.prompt_max_chars
    assert torch.equal(torch.random.get_rng_state(), rng_before)  # the caller's RNG is untouched
    again, _ = extend_or_fallback(adapter, job)
    assert again == used
    other, _ = extend_or_fallback(adapter, job.model_copy(update={"seed": 5}))
    assert other != used


def test_wan_keeps_its_chat_llm_loaded(adapters: dict[str, Adapter], make_job: MakeJob) -> None:
    wan = adapters["tiny-wan"]
    assert isinstance(wan, WanTextToVideo)
    extend_or_fallback(wan, make_job("tiny-wan", prompt=PROMPT, prompt_extend=True))
    llm = wan._llm
    assert llm is not None
    extend_or_fallback(wan, make_job("tiny-wan", prompt=PROMPT, prompt_extend=True, seed=9))
    assert wan._llm is llm


def _with_extension(adapter: Adapter, runtime: ModelRuntimeSettings, settings: PromptExtendSpec) -> Adapter:
    """The same loaded pipeline under a catalog entry with other prompt_extend settings."""
    spec = adapter.spec.model_copy(update={"prompt_extend": settings})
    cls = type(adapter)
    assert cls in (WanTextToVideo, LTX2TextToVideo)
    return cls(spec, runtime, adapter.pipe, device="cpu", dtype="float32")  # type: ignore[attr-defined, call-arg]


@pytest.mark.parametrize("model", ["tiny-wan", "tiny-ltx2"])
def test_timeout_falls_back_to_the_original_prompt(
    adapters: dict[str, Adapter], tiny_runtime: ModelRuntimeSettings, make_job: MakeJob, model: str
) -> None:
    settings = adapters[model].spec.prompt_extend
    assert settings is not None
    hurried = _with_extension(adapters[model], tiny_runtime, settings.model_copy(update={"timeout_s": 1e-4}))
    used, extension = extend_or_fallback(hurried, make_job(model, prompt=PROMPT, prompt_extend=True))
    assert used == PROMPT
    assert extension.status == "fallback"
    assert extension.reason is not None and "timed out" in extension.reason


def test_missing_chat_llm_falls_back(
    adapters: dict[str, Adapter], tiny_runtime: ModelRuntimeSettings, make_job: MakeJob
) -> None:
    broken = _with_extension(
        adapters["tiny-wan"], tiny_runtime, PromptExtendSpec(method="chat_llm", llm="no-such-llm", max_new_tokens=8)
    )
    used, extension = extend_or_fallback(broken, make_job("tiny-wan", prompt=PROMPT, prompt_extend=True))
    assert used == PROMPT
    assert extension.status == "fallback"
    assert extension.reason is not None and "no-such-llm" in extension.reason


def test_adapter_raises_and_the_worker_call_does_not(adapters: dict[str, Adapter], make_job: MakeJob) -> None:
    with pytest.raises(PromptExtendError, match="timed out"):
        adapters["tiny-ltx2"].extend_prompt(PROMPT, max_new_tokens=8, timeout_s=1e-4, seed=0)
    no_extension = adapters["tiny-wan"].spec.model_copy(update={"prompt_extend": None})
    wan = adapters["tiny-wan"]
    plain = WanTextToVideo(no_extension, wan.runtime, wan.pipe, device="cpu", dtype="float32")  # type: ignore[attr-defined]
    used, extension = extend_or_fallback(plain, make_job("tiny-wan", prompt=PROMPT))
    assert (used, extension.status) == (PROMPT, "fallback")


@pytest.mark.parametrize(
    ("raw", "clean"),
    [
        ("  a cat\n\tin   the rain ", "a cat in the rain"),
        ("x\x00y\x07z\x1b", "xyz"),
        ("caf\u00e9 \ufffd\ufffd \u200bok", "caf\u00e9 ok"),
        ("\x00\ufffd\n\u200b", ""),
        ("雪中的狐狸 ✓", "雪中的狐狸 ✓"),
    ],
)
def test_sanitize(raw: str, clean: str) -> None:
    assert sanitize(raw) == clean
