"""Prompt extension: both methods through the tiny models, the used prompt, and the fallbacks."""

from __future__ import annotations

import pytest

from foundation.core.catalog import Catalog, PromptExtendSpec
from foundation.settings.models import ModelRuntimeSettings
from pipelines.errors import PromptExtendError
from pipelines.families.ltx2 import LTX2TextToVideo
from pipelines.families.wan import WanTextToVideo
from pipelines.runtime.adapter import Adapter
from pipelines.runtime.cache import ModelCache
from pipelines.runtime.prompt_extend import extend_or_fallback, sanitize
from tests.pipelines.conftest import MakeJob

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


# sha256 of LM_ZH_SYS_PROMPT / LM_EN_SYS_PROMPT as Wan-Video/Wan2.1 @9737cba9 defines them (wan/utils/prompt_extend.py).
UPSTREAM_WAN_PROMPTS = {
    "zh": "76cb49107dfc75fa89cab0b22d77c17bb4f3e09153b8d3b8ee3c2ac136cc70c3",
    "en": "283ac4b4d7d5b13f5171a57377ab7dc89ed8fe14caff4c1f9ecdbae1f7bc4542",
}


def test_wan_system_prompts_are_upstreams_byte_for_byte() -> None:
    import hashlib

    from pipelines.families.system_prompts import WAN_SYSTEM_PROMPTS

    digests = {lang: hashlib.sha256(text.encode()).hexdigest() for lang, text in WAN_SYSTEM_PROMPTS.items()}
    assert digests == UPSTREAM_WAN_PROMPTS


@pytest.mark.parametrize("language", ["zh", "en"])
def test_the_wan_llm_sees_the_system_prompt_of_its_language(
    adapters: dict[str, Adapter], tiny_runtime: ModelRuntimeSettings, make_job: MakeJob, language: str
) -> None:
    """What reaches the chat template is upstream's text for the catalog's language."""
    from pipelines.families.system_prompts import WAN_SYSTEM_PROMPTS

    wan = adapters["tiny-wan"]
    settings = wan.spec.prompt_extend
    assert settings is not None
    adapter = _with_extension(wan, tiny_runtime, settings.model_copy(update={"language": language}))
    extend_or_fallback(adapter, make_job("tiny-wan", prompt=PROMPT, prompt_extend=True))  # loads its LLM
    llm = adapter._llm  # type: ignore[attr-defined]
    template = llm.tokenizer.apply_chat_template
    seen: list[str] = []

    def recording(messages: list[dict[str, str]], *args: object, **kwargs: object) -> object:
        seen.append(messages[0]["content"])
        return template(messages, *args, **kwargs)

    llm.tokenizer.apply_chat_template = recording
    try:
        extend_or_fallback(adapter, make_job("tiny-wan", prompt=PROMPT, prompt_extend=True))
    finally:
        del llm.tokenizer.apply_chat_template
    assert seen == [WAN_SYSTEM_PROMPTS[language]]


class _OutOfMemoryAdapter:
    """An adapter whose extension runs out of device memory (what torch raises on CUDA)."""

    def __init__(self, spec: object) -> None:
        self.spec = spec

    def extend_prompt(self, prompt: str, *, max_new_tokens: int, timeout_s: float, seed: int) -> str:
        import torch

        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")


def test_out_of_memory_in_extension_is_not_swallowed(adapters: dict[str, Adapter], make_job: MakeJob) -> None:
    import torch

    oom = _OutOfMemoryAdapter(adapters["tiny-wan"].spec)
    with pytest.raises(torch.OutOfMemoryError):
        extend_or_fallback(oom, make_job("tiny-wan", prompt=PROMPT, prompt_extend=True))  # type: ignore[arg-type]


def test_the_cache_counts_the_chat_llm_once_loaded(
    tiny_runtime: ModelRuntimeSettings, catalog: Catalog, make_job: MakeJob
) -> None:
    cache = ModelCache(tiny_runtime)
    try:
        spec = catalog.models["tiny-wan"]
        wan = cache.get(spec)
        before = cache.resident_bytes()
        assert before == wan.memory_bytes()
        extend_or_fallback(wan, make_job("tiny-wan", prompt=PROMPT, prompt_extend=True))
        assert wan.memory_bytes() > before  # the LLM is held with the model now
        cache.get(spec)  # the next job's hit measures it again
        assert cache.resident_bytes() == wan.memory_bytes() > before
    finally:
        cache.clear()
