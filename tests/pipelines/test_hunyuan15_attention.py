"""HunyuanVideo 1.5 attends without a dense L x L mask (pipelines/families/hunyuan15.py): on tiny-hunyuan15 as
loaded, every joint-attention call gets a (1, 1, 1, L) key-padding mask where diffusers' own processor builds a
(1, 1, L, L) one, and the transformer's output is the same with either."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import torch

from foundation.core.catalog import Catalog
from pipelines.families.generic import DiffusersTextToVideo
from pipelines.families.hunyuan15 import KeyPaddingAttnProcessor
from pipelines.runtime.cache import ModelCache
from tests.pipelines.conftest import MakeJob
from tests.pipelines.helpers import StepLog


@pytest.fixture(scope="module")
def adapter(model_cache: ModelCache, catalog: Catalog) -> DiffusersTextToVideo:
    loaded = model_cache.get(catalog.models["tiny-hunyuan15"])
    assert isinstance(loaded, DiffusersTextToVideo)
    return loaded


@contextmanager
def _masks_seen(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[int, tuple[int, ...], int]]]:
    """(sequence length, mask shape, mask elements) of every joint-attention call, ours and diffusers' alike."""
    import diffusers.models.transformers.transformer_hunyuan_video15 as stock

    import pipelines.families.hunyuan15 as ours

    seen: list[tuple[int, tuple[int, ...], int]] = []
    dispatch = stock.dispatch_attention_fn

    def recording(query: torch.Tensor, *args: Any, attn_mask: torch.Tensor | None = None, **kwargs: Any) -> Any:
        assert attn_mask is not None
        seen.append((query.shape[1], tuple(attn_mask.shape), attn_mask.numel()))
        return dispatch(query, *args, attn_mask=attn_mask, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(stock, "dispatch_attention_fn", recording)
        patch.setattr(ours, "dispatch_attention_fn", recording)
        yield seen


@contextmanager
def _stock_processors(transformer: Any) -> Iterator[None]:
    """diffusers' own HunyuanVideo 1.5 processors in place of ours, for the duration."""
    ours = dict(transformer.attn_processors)
    stock = {
        k: KeyPaddingAttnProcessor.replaces() if isinstance(p, KeyPaddingAttnProcessor) else p for k, p in ours.items()
    }
    transformer.set_attn_processor(stock)
    try:
        yield
    finally:
        transformer.set_attn_processor(ours)


def test_every_joint_attention_gets_a_key_padding_mask_not_a_dense_one(
    adapter: DiffusersTextToVideo, make_job: MakeJob, monkeypatch: pytest.MonkeyPatch
) -> None:
    transformer = adapter.pipe.transformer
    processors = transformer.attn_processors
    joint = [k for k, p in processors.items() if isinstance(p, KeyPaddingAttnProcessor)]
    assert joint and len(joint) == len(transformer.transformer_blocks)  # one per block; the token refiner keeps its own
    job = make_job("tiny-hunyuan15", variant="fast")
    with _masks_seen(monkeypatch) as seen:
        adapter.denoise(job, StepLog())
    assert len(seen) == len(joint) * job.steps  # CFG off: one call per block and step
    for length, shape, elements in seen:
        assert shape == (1, 1, 1, length) and elements == length  # O(L), not O(L^2)
    # The same call through diffusers' processor builds the (1, 1, L, L) mask this test exists to keep out.
    with _stock_processors(transformer), _masks_seen(monkeypatch) as stock:
        adapter.denoise(job, StepLog())
    assert stock and all(shape == (1, 1, length, length) for length, shape, _ in stock)


def test_the_transformer_gives_the_same_output_with_either_mask(
    adapter: DiffusersTextToVideo, make_job: MakeJob
) -> None:
    """The padded text tokens are hidden as keys either way; only their own (unused) outputs differ."""
    transformer = adapter.pipe.transformer
    calls: list[dict[str, Any]] = []
    handle = transformer.register_forward_pre_hook(lambda _m, _a, kwargs: calls.append(dict(kwargs)), with_kwargs=True)
    try:
        adapter.denoise(make_job("tiny-hunyuan15", variant="standard", seed=2), StepLog())
    finally:
        handle.remove()
    inputs = calls[0]
    mask = inputs["encoder_attention_mask"]
    assert not mask.bool().all()  # the job's text is padded: the mask hides something
    with torch.no_grad():
        ours = transformer(**inputs)[0]
        with _stock_processors(transformer):
            stock = transformer(**inputs)[0]
    torch.testing.assert_close(ours, stock, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    ("ref", "message"),
    [
        ("pipelines.families.hunyuan15:KeyPaddingAttnProcessor", "no HunyuanVideo15AttnProcessor2_0 to replace"),
        ("pipelines.families.hunyuan15:NoSuchProcessor", "cannot be imported"),
    ],
)
def test_a_processor_that_replaces_nothing_fails_the_load(
    model_cache: ModelCache, catalog: Catalog, ref: str, message: str
) -> None:
    """Named on a model it does not fit (SkyReels-V2's Wan attention), the load fails instead of running unchanged."""
    from pipelines.errors import ModelLoadError
    from pipelines.families.generic import replace_attention

    skyreels = model_cache.get(catalog.models["tiny-skyreels-v2"])
    with pytest.raises(ModelLoadError, match=message):
        replace_attention(skyreels.pipe, ["transformer"], ref)  # type: ignore[attr-defined]
