"""HunyuanVideo 1.5 attends without a dense L x L mask (pipelines/families/hunyuan15.py): on tiny-hunyuan15 as
loaded, every joint-attention call cuts the padded text keys off and calls SDPA with no mask at all, where
diffusers' own processor builds a (1, 1, L, L) mask; any other mask gets a (B, 1, 1, L) key-padding one; and the
transformer's output is the same on every path.

SDPA's calls are observed with a ``TorchFunctionMode`` that records what ``scaled_dot_product_attention`` is given
and runs it."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pytest
import torch
from torch.overrides import TorchFunctionMode

from foundation.core.catalog import Catalog
from pipelines.families.generic import DiffusersTextToVideo
from pipelines.families.hunyuan15 import KeyPaddingAttnProcessor, shared_valid_prefix
from pipelines.runtime.cache import ModelCache
from tests.pipelines.conftest import MakeJob
from tests.pipelines.helpers import StepLog

# bfloat16 keeps 8 significant bits. Cutting the padded keys off changes nothing but the order of the kernel's
# float32 sums (a masked key adds exactly 0), which can flip one bfloat16 rounding of an attention output; carried
# through the output projection that moves a result by about one unit in the last place of the largest output,
# 2^-8 of it. Two units are allowed (measured: at most one). Float32 differs by float32 rounding only (6e-8 seen).
BF16_ULPS = 2 * 2.0**-8


def _assert_same(actual: torch.Tensor, expected: torch.Tensor) -> None:
    if expected.dtype == torch.bfloat16:
        torch.testing.assert_close(actual, expected, rtol=0.0, atol=BF16_ULPS * expected.abs().max().item())
    else:
        torch.testing.assert_close(actual, expected, rtol=1e-6, atol=1e-6)


@pytest.fixture(scope="module")
def adapter(model_cache: ModelCache, catalog: Catalog) -> DiffusersTextToVideo:
    loaded = model_cache.get(catalog.models["tiny-hunyuan15"])
    assert isinstance(loaded, DiffusersTextToVideo)
    return loaded


@pytest.fixture(scope="module")
def transformer_inputs(adapter: DiffusersTextToVideo, make_job: MakeJob) -> dict[str, Any]:
    """The keyword arguments of the transformer's first call in a job with CFG on, as the pipeline passes them."""
    calls: list[dict[str, Any]] = []
    transformer = adapter.pipe.transformer
    handle = transformer.register_forward_pre_hook(lambda _m, _a, kwargs: calls.append(dict(kwargs)), with_kwargs=True)
    try:
        adapter.denoise(make_job("tiny-hunyuan15", variant="standard", seed=2), StepLog())
    finally:
        handle.remove()
    return calls[0]


@dataclass(frozen=True)
class SdpaCall:
    """What one ``scaled_dot_product_attention`` call was given: (B, heads, tokens, dim) shapes and the mask's."""

    query: tuple[int, ...]
    key: tuple[int, ...]
    mask: tuple[int, ...] | None


class _SdpaRecorder(TorchFunctionMode):
    """Records every SDPA call made while ``recording`` is on, and runs it."""

    def __init__(self) -> None:
        super().__init__()
        self.recording = True
        self.calls: list[SdpaCall] = []

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if func is torch.nn.functional.scaled_dot_product_attention and self.recording:
            given = dict(zip(("query", "key", "value", "attn_mask"), args, strict=False)) | kwargs
            mask = given.get("attn_mask")
            shape = None if mask is None else tuple(mask.shape)
            self.calls.append(SdpaCall(tuple(given["query"].shape), tuple(given["key"].shape), shape))
        return func(*args, **kwargs)


@contextmanager
def _sdpa_calls() -> Iterator[list[SdpaCall]]:
    with _SdpaRecorder() as recorder:
        yield recorder.calls


@contextmanager
def _joint_sdpa_calls(transformer: Any) -> Iterator[list[SdpaCall]]:
    """The SDPA calls of the transformer blocks' joint attention only (not the text encoder's, not the refiner's)."""
    recorder = _SdpaRecorder()
    recorder.recording = False
    handles = []
    for block in transformer.transformer_blocks:
        handles.append(block.attn.register_forward_pre_hook(lambda *_: setattr(recorder, "recording", True)))
        handles.append(block.attn.register_forward_hook(lambda *_: setattr(recorder, "recording", False)))
    try:
        with recorder:
            yield recorder.calls
    finally:
        for handle in handles:
            handle.remove()


@contextmanager
def _processors(transformer: Any, make: Any) -> Iterator[None]:
    """``make()``'s processors in place of ours (diffusers' own, or ours with the cut off), for the duration."""
    ours = dict(transformer.attn_processors)
    swapped = {k: make() if isinstance(p, KeyPaddingAttnProcessor) else p for k, p in ours.items()}
    transformer.set_attn_processor(swapped)
    try:
        yield
    finally:
        transformer.set_attn_processor(ours)


def _cast(value: Any, dtype: torch.dtype) -> Any:
    return value.to(dtype) if torch.is_tensor(value) and value.is_floating_point() else value


def _stock_processors(transformer: Any) -> Any:
    return _processors(transformer, KeyPaddingAttnProcessor.replaces)


def _masking_processors(transformer: Any) -> Any:
    return _processors(transformer, lambda: KeyPaddingAttnProcessor(slice_padding_tail=False))


# ------------------------------------------------------------------------------------------------ the transformer


def test_every_joint_attention_runs_without_a_mask(adapter: DiffusersTextToVideo, make_job: MakeJob) -> None:
    """CFG on: the guider runs the conditional and the unconditional pass as two calls of batch 1, each with its own
    valid length, and each cuts its own padding off."""
    transformer = adapter.pipe.transformer
    joint = [k for k, p in transformer.attn_processors.items() if isinstance(p, KeyPaddingAttnProcessor)]
    assert joint and len(joint) == len(transformer.transformer_blocks)  # one per block; the token refiner keeps its own
    job = make_job("tiny-hunyuan15", variant="standard", seed=2)
    with _joint_sdpa_calls(transformer) as seen:
        adapter.denoise(job, StepLog())
    assert len(seen) == len(joint) * job.steps * 2  # one call per block, step and CFG branch
    for call in seen:
        assert call.mask is None and call.query[0] == 1
        assert call.key[2] < call.query[2]  # the padded text keys are gone
    assert len({call.key[2] for call in seen}) == 2  # the prompt and the negative prompt: two valid lengths
    # Ours with the cut off: an O(L) key-padding mask. diffusers': the (1, 1, L, L) mask this module exists to avoid.
    with _masking_processors(transformer), _joint_sdpa_calls(transformer) as masked:
        adapter.denoise(job, StepLog())
    assert masked and all(c.mask == (1, 1, 1, c.query[2]) and c.key == c.query for c in masked)
    with _stock_processors(transformer), _joint_sdpa_calls(transformer) as stock:
        adapter.denoise(job, StepLog())
    assert stock and all(c.mask == (1, 1, c.query[2], c.query[2]) for c in stock)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bfloat16"])
def test_the_transformer_gives_the_same_output_on_every_path(
    adapter: DiffusersTextToVideo, transformer_inputs: dict[str, Any], dtype: torch.dtype
) -> None:
    """Keys cut off, keys masked (ours), dense mask (diffusers'): the padded text tokens are hidden as keys every way;
    only their own (unused) outputs differ. bfloat16 is the shipped dtype; the tiny model is stored in float32."""
    transformer = copy.deepcopy(adapter.pipe.transformer).to(dtype)
    inputs = {k: _cast(v, dtype) for k, v in transformer_inputs.items()}
    assert not inputs["encoder_attention_mask"].bool().all()  # the job's text is padded: the mask hides something
    with torch.no_grad():
        cut = transformer(**inputs)[0]
        with _masking_processors(transformer):
            masked = transformer(**inputs)[0]
        with _stock_processors(transformer):
            stock = transformer(**inputs)[0]
    _assert_same(cut, masked)
    _assert_same(cut, stock)


def test_a_compiled_block_stays_one_graph(adapter: DiffusersTextToVideo, transformer_inputs: dict[str, Any]) -> None:
    """``torch.compile(fullgraph=True)``, as the worker compiles blocks: the cut depends on the mask's values, so a
    compiled block keeps the key-padding mask instead of breaking the graph, and gives what the eager block gives."""
    transformer = adapter.pipe.transformer
    block = transformer.transformer_blocks[0]
    captured: list[tuple[Any, ...]] = []
    handle = block.register_forward_pre_hook(lambda _m, args: captured.append(args))
    try:
        with torch.no_grad():
            transformer(**transformer_inputs)
    finally:
        handle.remove()
    with torch.no_grad():
        eager = block(*captured[0])
        compiled = torch.compile(block.forward, fullgraph=True, backend="eager")(*captured[0])
    for ours, theirs in zip(compiled, eager, strict=True):
        torch.testing.assert_close(ours, theirs, rtol=1e-6, atol=1e-6)


# ------------------------------------------------------------------------------------------------ one processor


def _joint_attention(dtype: torch.dtype, seed: int = 0) -> Any:
    """A HunyuanVideo 1.5 block's joint attention with random weights: 2 heads of 64 channels."""
    from diffusers.models.transformers.transformer_hunyuan_video15 import HunyuanVideo15TransformerBlock

    torch.manual_seed(seed)
    return HunyuanVideo15TransformerBlock(num_attention_heads=2, attention_head_dim=64, mlp_ratio=2.0).attn.to(dtype)


def _streams(batch: int, video: int, text: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(1)
    return (
        torch.randn(batch, video, 128, generator=generator).to(dtype),
        torch.randn(batch, text, 128, generator=generator).to(dtype),
    )


def _run(processor: Any, attn: Any, streams: tuple[torch.Tensor, torch.Tensor], mask: torch.Tensor) -> Any:
    """(video out, text out) of one joint-attention call."""
    with torch.no_grad():
        return processor(attn, *streams, mask)


def _text_mask(valid: list[int], text: int) -> torch.Tensor:
    """Each row keeps its first ``valid[row]`` text tokens: the transformer's order (padding last)."""
    return torch.arange(text)[None, :] < torch.tensor(valid)[:, None]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bfloat16"])
@pytest.mark.parametrize("valid", [[37], [5, 5], [80]], ids=["tail-of-43", "batch-tail-of-75", "no-padding"])
def test_cutting_a_padding_tail_gives_what_the_masks_give(dtype: torch.dtype, valid: list[int]) -> None:
    """Random inputs, every row's text keeping a prefix of the same length: the cut path (SDPA called with no mask,
    K and V one row per valid token) equals our key-padding path on every row, padded query rows included (they
    attend over the valid keys either way), and diffusers' dense-mask processor on the video and valid text rows."""
    attn, (batch, video, text) = _joint_attention(dtype), (len(valid), 96, 80)
    streams, mask = _streams(batch, video, text, dtype), _text_mask(valid, text)
    with _sdpa_calls() as calls:
        cut = _run(KeyPaddingAttnProcessor(), attn, streams, mask)
    assert calls == [SdpaCall((batch, 2, video + text, 64), (batch, 2, video + valid[0], 64), None)]
    masked = _run(KeyPaddingAttnProcessor(slice_padding_tail=False), attn, streams, mask)
    stock = _run(KeyPaddingAttnProcessor.replaces(), attn, streams, mask)
    _assert_same(cut[0], masked[0])
    _assert_same(cut[1], masked[1])
    _assert_same(cut[0], stock[0])
    _assert_same(cut[1][:, : valid[0]], stock[1][:, : valid[0]])
    assert torch.isfinite(cut[1]).all()


@pytest.mark.parametrize(
    ("mask", "case"),
    [
        (torch.tensor([[True] * 10 + [False] * 6 + [True] * 20 + [False] * 44]), "a hole in the middle"),
        (_text_mask([37, 12], 80), "rows of different lengths"),
        (~_text_mask([44], 80), "padding first"),
    ],
    ids=["hole", "different-lengths", "padding-first"],
)
def test_any_other_mask_keeps_the_key_padding_mask(mask: torch.Tensor, case: str) -> None:
    """Not a shared tail: SDPA gets the (B, 1, 1, L) key-padding mask and every valid row its dense-mask result."""
    attn, (batch, video, text) = _joint_attention(torch.float32), (mask.shape[0], 96, 80)
    streams = _streams(batch, video, text, torch.float32)
    assert shared_valid_prefix(mask) is None, case
    with _sdpa_calls() as calls:
        ours = _run(KeyPaddingAttnProcessor(), attn, streams, mask)
    length = video + text
    assert calls == [SdpaCall((batch, 2, length, 64), (batch, 2, length, 64), (batch, 1, 1, length))]
    stock = _run(KeyPaddingAttnProcessor.replaces(), attn, streams, mask)
    _assert_same(ours[0], stock[0])
    _assert_same(ours[1][mask], stock[1][mask])


@pytest.mark.parametrize("slice_padding_tail", [True, False], ids=["cut", "masked"])
def test_a_padded_token_never_reaches_a_valid_one(slice_padding_tail: bool) -> None:
    """Two blocks in a row, the padded text tokens' hidden states replaced by large random values: the video tokens
    and the valid text tokens come out bit for bit the same. Attention is the only place tokens mix, and there a
    padded token is only a key, cut off or masked; everything else in a block works token by token."""
    from diffusers.models.transformers.transformer_hunyuan_video15 import HunyuanVideo15TransformerBlock

    torch.manual_seed(0)
    blocks = [HunyuanVideo15TransformerBlock(2, 64, mlp_ratio=2.0) for _ in range(2)]
    for block in blocks:
        block.attn.set_processor(KeyPaddingAttnProcessor(slice_padding_tail=slice_padding_tail))
    hidden, encoder = _streams(1, 96, 80, torch.float32)
    mask, temb = _text_mask([29], 80), torch.randn(1, 128)
    disturbed = encoder.clone()
    disturbed[:, 29:] = 1e3 * torch.randn_like(disturbed[:, 29:])
    outputs = []
    with torch.no_grad():
        for text in (encoder, disturbed):
            video_out, text_out = hidden, text
            for block in blocks:
                video_out, text_out = block(video_out, text_out, temb, mask)
            outputs.append((video_out, text_out[:, :29]))
    assert torch.equal(outputs[0][0], outputs[1][0]) and torch.equal(outputs[0][1], outputs[1][1])


def test_the_valid_prefix_is_read_from_the_mask() -> None:
    assert shared_valid_prefix(_text_mask([7, 7, 7], 12)) == 7
    assert shared_valid_prefix(torch.ones(1, 12, dtype=torch.long)) == 12  # no padding: the integer masks callers pass
    assert shared_valid_prefix(torch.zeros(1, 12, dtype=torch.bool)) == 0  # only the video tokens are keys
    assert shared_valid_prefix(_text_mask([7, 6], 12)) is None
    assert shared_valid_prefix(torch.tensor([[1, 1, 0, 1]])) is None


# ------------------------------------------------------------------------------------------------ loading


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
