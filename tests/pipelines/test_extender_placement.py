"""The chat LLM visits the device only for its call (issue 18): on a CUDA worker it rests in host memory,
moves to the device right before generating and back right after, a failing generation included.

No GPU here: the load decides the placement from the device name (checked with a CUDA name, without moving
anything), and the visit is observed through the calls the LLM receives around ``generate``, in order.
"""

from __future__ import annotations

from typing import Any

import pytest

from foundation.settings.models import ModelRuntimeSettings
from pipelines.runtime.prompt_extend import ChatLLM


def _visits(llm: ChatLLM, calls: list[str], fail: bool = False) -> None:
    model = llm.model
    real_to, real_generate = model.to, model.generate

    def to(device: Any, *args: Any, **kwargs: Any) -> Any:
        calls.append(f"to {device}")
        return real_to(device, *args, **kwargs)

    def generate(*args: Any, **kwargs: Any) -> Any:
        calls.append("generate")
        if fail:
            raise RuntimeError("generation failed")
        return real_generate(*args, **kwargs)

    model.to, model.generate = to, generate


@pytest.fixture(scope="module")
def llm(tiny_runtime: ModelRuntimeSettings) -> ChatLLM:
    return ChatLLM.load("tiny-chat-llm", tiny_runtime, tiny=True, device="cpu", dtype="float32")


def test_on_cuda_the_llm_rests_on_the_host_between_calls(llm: ChatLLM) -> None:
    assert llm.offload is False  # on CPU there is nowhere else to go
    visiting = ChatLLM(llm.model, llm.tokenizer, device="cpu", offload=True)  # what a cuda device gets
    calls: list[str] = []
    _visits(visiting, calls)
    text = visiting.rewrite("Rewrite the prompt.", "a fox", max_new_tokens=8, timeout_s=10, seed=1)
    assert isinstance(text, str)
    assert calls == ["to cpu", "generate", "to cpu"]  # onto the device, generate, back to the host
    del visiting.model.to, visiting.model.generate  # the class's own methods again
    calls.clear()
    _visits(visiting, calls, fail=True)
    with pytest.raises(RuntimeError, match="generation failed"):
        visiting.rewrite("Rewrite the prompt.", "a fox", max_new_tokens=8, timeout_s=10, seed=1)
    assert calls == ["to cpu", "generate", "to cpu"]  # back to the host even when generation fails
    del visiting.model.to, visiting.model.generate


def test_a_cuda_worker_loads_the_llm_onto_the_host(tiny_runtime: ModelRuntimeSettings) -> None:
    llm = ChatLLM.load("tiny-chat-llm", tiny_runtime, tiny=True, device="cuda:0", dtype="float32")
    assert llm.offload is True and llm.device == "cuda:0"
    assert {p.device.type for p in llm.model.parameters()} == {"cpu"}
