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
    settings = PromptExtendSpec(method="chat_llm", llm="no-such-llm", system_prompt="wan2.1", max_new_tokens=8)
    broken = _with_extension(adapters["tiny-wan"], tiny_runtime, settings)
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


# sha256 of each official system prompt, as upstream defines it (the value, UTF-8):
# - Wan 2.1: Wan-Video/Wan2.1 @9737cba9c1c3c4d04b33fcad41c111989865d315 wan/utils/prompt_extend.py,
#   LM_{ZH,EN}_SYS_PROMPT;
# - Wan 2.2: Wan-Video/Wan2.2 @42bf4cfaa384bc21833865abc2f9e6c0e67233dc wan/utils/system_prompt.py (last changed in
#   fa96d0963f1aef3b0f9dd312296d54b13e2da538), the six constants its wan/utils/prompt_extend.py DEFAULT_SYS_PROMPTS
#   uses.
UPSTREAM_WAN_PROMPTS = {
    "LM_ZH_SYS_PROMPT": "76cb49107dfc75fa89cab0b22d77c17bb4f3e09153b8d3b8ee3c2ac136cc70c3",
    "LM_EN_SYS_PROMPT": "283ac4b4d7d5b13f5171a57377ab7dc89ed8fe14caff4c1f9ecdbae1f7bc4542",
    "T2V_A14B_ZH_SYS_PROMPT": "b5d0d0ba3dcaec1d01e9b8787cf4930e0eecdf0ee8499523dd3d340eb5636a9a",
    "T2V_A14B_EN_SYS_PROMPT": "9cc4646b4c6d2ce4c33c139a5050acceb99dc47729f0d23cc79a2e3ea910dd28",
    "I2V_A14B_ZH_SYS_PROMPT": "e0e7fcc0f5a453dab8e204c828362b3762c8dc282224862dea6ec4bdbfaf394e",
    "I2V_A14B_EN_SYS_PROMPT": "8b41399d615c5cf2c293ef38365b900a30834589a45d6318bd6242a51cb9dd76",
    "I2V_A14B_EMPTY_ZH_SYS_PROMPT": "a66b264ed1d5633500448d1a0ea8c2ae856233b677341771148905dd92f20713",
    "I2V_A14B_EMPTY_EN_SYS_PROMPT": "9e7a9b31337e31cb672891130898c0545656b86cfc14dd9e9327f7ded7785e65",
}

# Which upstream text each task gets (Wan 2.2 prompt_extend.py decide_system_prompt; Wan 2.1's SYSTEM_PROMPT_TYPES):
# (prompt set, image given, prompt) -> constant name, in the language's case.
UPSTREAM_CHOICE = [
    ("wan2.1", False, PROMPT, "LM_{}_SYS_PROMPT"),
    ("wan2.2-t2v-a14b", False, PROMPT, "T2V_A14B_{}_SYS_PROMPT"),
    ("wan2.2-i2v-a14b", True, PROMPT, "I2V_A14B_{}_SYS_PROMPT"),
    ("wan2.2-i2v-a14b", True, "", "I2V_A14B_EMPTY_{}_SYS_PROMPT"),
    ("wan2.2-ti2v-5b", True, PROMPT, "I2V_A14B_{}_SYS_PROMPT"),
    ("wan2.2-ti2v-5b", True, "", "I2V_A14B_{}_SYS_PROMPT"),  # TI2V never takes the empty-prompt text
    ("wan2.2-ti2v-5b", False, PROMPT, "T2V_A14B_{}_SYS_PROMPT"),
]


def _sha256(text: str) -> str:
    import hashlib

    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def test_every_wan_system_prompt_is_upstreams_byte_for_byte() -> None:
    from pipelines.families.system_prompts import WAN_PROMPT_SETS

    kept = {_sha256(text) for cases in WAN_PROMPT_SETS.values() for texts in cases.values() for text in texts.values()}
    assert kept == set(UPSTREAM_WAN_PROMPTS.values())


@pytest.mark.parametrize("language", ["zh", "en"])
@pytest.mark.parametrize(("prompt_set", "image", "prompt", "name"), UPSTREAM_CHOICE)
def test_each_task_gets_the_system_prompt_upstream_gives_it(
    prompt_set: str, image: bool, prompt: str, name: str, language: str
) -> None:
    from pipelines.families.system_prompts import wan_system_prompt

    chosen = wan_system_prompt(prompt_set, language, image=image, prompt=prompt)
    assert _sha256(chosen) == UPSTREAM_WAN_PROMPTS[name.format(language.upper())]


def test_the_catalog_gives_each_wan_chat_llm_its_own_versions_prompts(catalog: Catalog) -> None:
    """Wan 2.1 entries use Wan 2.1's LM_* texts, Wan 2.2 T2V its T2V_A14B_* (not Wan 2.1's); no image model has a
    chat LLM (upstream extends image prompts with a vision-language model)."""
    chosen = {
        spec.id: spec.prompt_extend.system_prompt
        for spec in catalog.models.values()
        if spec.prompt_extend is not None and spec.prompt_extend.method == "chat_llm"
    }
    assert chosen == {
        "wan2.1-t2v-1.3b": "wan2.1",
        "wan2.1-t2v-14b": "wan2.1",
        "wan2.2-t2v-a14b": "wan2.2-t2v-a14b",
        "tiny-wan": "wan2.1",
        "tiny-wan-a14b": "wan2.2-t2v-a14b",
    }
    assert not any("image_to_video" in catalog.models[model].modes for model in chosen)


@pytest.mark.parametrize(("prompt_set", "language"), [("wan2.1", "zh"), ("wan2.1", "en"), ("wan2.2-t2v-a14b", "en")])
def test_the_wan_llm_sees_the_system_prompt_of_its_task_and_language(
    adapters: dict[str, Adapter],
    tiny_runtime: ModelRuntimeSettings,
    make_job: MakeJob,
    prompt_set: str,
    language: str,
) -> None:
    """What reaches the chat template is upstream's text for the catalog entry's task and language."""
    from pipelines.families.system_prompts import wan_system_prompt

    wan = adapters["tiny-wan"]
    settings = wan.spec.prompt_extend
    assert settings is not None
    adapter = _with_extension(
        wan, tiny_runtime, settings.model_copy(update={"language": language, "system_prompt": prompt_set})
    )
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
    assert seen == [wan_system_prompt(prompt_set, language, image=False, prompt=PROMPT)]


# LTX-2's system prompts as the installed diffusers ships them (diffusers 0.42.1 pipelines/ltx2/utils.py), the texts the
# adapter sends. Lightricks' own files (Lightricks/LTX-2 @400fd31054597515f47125691032c04b1c3ee24e packages/ltx-core/
# src/ltx_core/text_encoders/gemma/encoders/prompts/gemma3_{t2v,i2v}_system_prompt.txt: sha256 0f98f02f9fffae27...
# and dbba877a41e60f9a...) hold the same words with other line breaks; diffusers' copies are the reference here.
DIFFUSERS_LTX2_PROMPTS = {
    "T2V_DEFAULT_SYSTEM_PROMPT": "3280801f5bdb91780db2f358cc2ea1fd2efd04741c9cfa656a394844f0bca718",
    "I2V_DEFAULT_SYSTEM_PROMPT": "13d49faf8e1d982e2b56c28083f045bd208bbf1c119a30d451d85b1c3ec4d92e",
}


def test_ltx2_system_prompts_are_the_pinned_diffusers_texts() -> None:
    from diffusers.pipelines.ltx2 import utils

    assert {name: _sha256(getattr(utils, name)) for name in DIFFUSERS_LTX2_PROMPTS} == DIFFUSERS_LTX2_PROMPTS


@pytest.mark.parametrize("with_image", [True, False])
def test_ltx2_extends_an_image_job_with_the_i2v_prompt_and_the_image(
    adapters: dict[str, Adapter], make_job: MakeJob, monkeypatch: pytest.MonkeyPatch, with_image: bool
) -> None:
    """Through tiny-ltx2's real Gemma-3 processor and vision tower: an image job's rewrite sees its image (scaled to
    a long side of 896, as upstream) under the I2V prompt; a text job gets the T2V prompt and no image."""
    from diffusers.pipelines.ltx2.utils import I2V_DEFAULT_SYSTEM_PROMPT, T2V_DEFAULT_SYSTEM_PROMPT

    from tests.pipelines.i2v_support import pattern

    ltx2 = adapters["tiny-ltx2"]
    processor = ltx2.pipe.processor  # type: ignore[attr-defined]
    calls: list[dict[str, object]] = []
    template = processor.tokenizer.apply_chat_template
    run = type(processor).__call__

    def templating(messages: list[dict[str, object]], *args: object, **kwargs: object) -> object:
        calls.append({"system": messages[0]["content"]})
        return template(messages, *args, **kwargs)

    def processing(self: object, *args: object, **kwargs: object) -> object:
        calls[-1]["images"] = kwargs.get("images")
        return run(self, *args, **kwargs)

    monkeypatch.setattr(processor.tokenizer, "apply_chat_template", templating)
    monkeypatch.setattr(type(processor), "__call__", processing)
    image = pattern(3, width=256, height=144)
    job = make_job("tiny-ltx2", prompt=PROMPT, prompt_extend=True)
    used, extension = extend_or_fallback(ltx2, job, image=image if with_image else None)
    assert extension.status == "applied" and used != PROMPT
    [call] = calls
    if with_image:
        assert call["system"] == I2V_DEFAULT_SYSTEM_PROMPT
        seen = call["images"]
        assert getattr(seen, "size", None) == (896, 504)  # the job's image, long side 896, aspect kept
    else:
        assert call["system"] == T2V_DEFAULT_SYSTEM_PROMPT and call["images"] is None


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
