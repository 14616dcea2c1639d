"""HunyuanVideo 1.5's joint attention without the dense L x L mask (diffusers ``HunyuanVideo15Transformer3DModel``).

HunyuanVideo 1.5 is served by the generic adapter (``pipelines.families.generic``); its catalog block names this
processor (``diffusers.attention_processor``), which the adapter puts in place of diffusers' own at load.

Model facts behind it (diffusers 0.42.1 ``models/transformers/transformer_hunyuan_video15.py``):
- each of the 54 double-stream blocks attends over one sequence: the video tokens, then 1,985 text-side tokens
  (729 SigLIP image slots, 256 byT5 and 1,000 Qwen2.5-VL tokens, always padded to those lengths); the
  transformer reorders the text side so its valid tokens come first and the padding last, so the valid keys of
  a row are a prefix of its sequence (video tokens, valid text, then padding);
- ``HunyuanVideo15AttnProcessor2_0`` turns the (B, L) key-padding mask into a dense (B, 1, L, L) bool mask on
  every call (``mask_q & mask_k``, two L^2-byte tensors held through the call), and SDPA's memory-efficient kernel
  turns a bool mask into an additive bfloat16 one of its own shape, then pads that to an 8-aligned last dimension
  (one more copy). Per attention call: 14.2 GiB at 832x480 x 121 frames (L = 50,345); 72 GiB at 1280x720 x 121
  frames (L = 113,585: 24 GiB of bool masks, 2 x 24 GiB of bias at the peak);
- the pipeline runs CFG's two branches as two forward calls (its ``ClassifierFreeGuidance`` guider yields one
  batch per condition), so each call has batch 1; ``num_videos_per_prompt`` rows repeat one prompt (one length).

What this processor does instead:
- **a padding tail is cut off**: when every row's valid keys are a prefix and all rows share its length (always,
  at batch 1, after the transformer's reordering), K and V are sliced to that length (views, no copy) and SDPA
  runs with no mask: nothing is materialized, and any kernel may run. Flash refuses every mask, so the masked
  paths never ran it; cuDNN (torch's first choice on sm90/sm100 with cuDNN newer than 9.15) takes a mask only as
  an additive bias; memory-efficient and math take either (math materializes the L^2 scores either way). The
  padded keys are no longer computed: for a text-to-video prompt of 100 to 300 valid text tokens, 1,685 to 1,885
  of the 1,985 text-side keys, 1.5-1.7 % of every call's keys at 720p and 3.4-3.7 % at 480p;
- **any other mask** (a hole, rows of a batch with different valid lengths) gets a (B, 1, 1, L) key-padding mask
  broadcast over the queries: SDPA converts and aligns the (B, 1, 1, L) tensor, then expands it as a view (0.57
  MB per call at 720p, where the dense mask costs 72 GiB), and diffusers' varlen backends reduce either shape to
  per-key lengths. This is also the path under ``torch.compile`` (a ``fullgraph`` block admits no branch on a
  tensor's values, nor a length read from one) and under context parallelism (each rank holds a slice of the
  sequence, whose prefix is not the sequence's);
- deciding costs one device-to-host read of three numbers per call (54 per forward), negligible beside what a
  call computes (16 heads of 128: 4 L^2 x 2,048 = 1.1e14 floating-point operations at 720p).
  ``slice_padding_tail=False`` keeps the mask (the A/B against the cut).

Why every path gives the video and valid text tokens exactly what the dense mask gives them: a padded token only
ever appears as a key (cut off, or hidden by the mask), and everything else in a block (the modulated norms, the
projections, the QK norms, the feed-forward) works token by token, so a padded token's hidden state never reaches
a valid one, in any block. The padded query rows get attention over the valid keys, on the cut path as on the
key-padding one (a convex combination of valid values: finite, where the dense mask leaves them no key at all);
the text stream carries them to the next block, where they are only keys again, and ``proj_out`` reads the video
tokens only.

The image-to-video pipeline (``HunyuanVideo15ImageToVideoPipeline``) takes no height or width: it sizes the video
from the image, as the bucket of ``generate_crop_size_list(target_size, 16)`` nearest the image's h/w, with the
buckets' ratios rounded to five decimals and, for a portrait image, only buckets no taller in ratio than the image.
The worker has already fitted the image to the job's size, an official bucket, and on that exact size the rounding
picks another bucket for 2 of the 5 ratios at 480p (9:16 480x848 -> 480x832, 3:4 544x720 -> 560x720) and 2 at
720p (9:16 720x1280 -> 720x1264, 4:3 1104x832 -> 1088x832). ``FittedImageProcessor`` keeps an image that is
already on the VAE stride at its size.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from diffusers.models.attention_dispatch import dispatch_attention_fn
from diffusers.models.transformers.transformer_hunyuan_video15 import HunyuanVideo15AttnProcessor2_0
from diffusers.pipelines.hunyuan_video1_5.image_processor import HunyuanVideo15ImageProcessor

if TYPE_CHECKING:
    import torch

__all__ = ["FittedImageProcessor", "KeyPaddingAttnProcessor", "shared_valid_prefix"]


def shared_valid_prefix(attention_mask: torch.Tensor) -> int | None:
    """How many leading tokens every row of a (B, N) mask keeps, when each row keeps exactly a prefix and all rows
    keep the same number; None otherwise (a hole, or rows of different lengths)."""
    import torch

    keep = attention_mask.bool()
    lengths = keep.sum(dim=1)
    prefix = torch.arange(keep.shape[1], device=keep.device) < lengths[:, None]
    # One device-to-host read for the three numbers the decision needs.
    is_prefix, shortest, longest = torch.stack([(prefix == keep).all().long(), lengths.min(), lengths.max()]).tolist()
    return shortest if is_prefix and shortest == longest else None


class KeyPaddingAttnProcessor(HunyuanVideo15AttnProcessor2_0):  # type: ignore[misc]
    """diffusers' HunyuanVideo 1.5 processor without its (B, 1, L, L) mask: the padded keys cut off when they are a
    tail, a (B, 1, 1, L) key-padding mask otherwise.

    The rest is the parent's ``__call__`` unchanged: projections, QK norms, rotary embedding on the video stream,
    the text stream's projections, one attention call, the output projections."""

    # The diffusers processor this one stands in for (the generic adapter replaces exactly its instances).
    replaces = HunyuanVideo15AttnProcessor2_0

    def __init__(self, *, slice_padding_tail: bool = True) -> None:
        super().__init__()
        # Off: always the key-padding mask (the A/B that keeps the cut honest, and the tests' reference).
        self.slice_padding_tail = slice_padding_tail

    def __call__(
        self,
        attn: Any,
        hidden_states: torch.Tensor,
        encoder_hidden_states: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        image_rotary_emb: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        import torch

        # 1. QKV projections
        query = attn.to_q(hidden_states).unflatten(2, (attn.heads, -1))
        key = attn.to_k(hidden_states).unflatten(2, (attn.heads, -1))
        value = attn.to_v(hidden_states).unflatten(2, (attn.heads, -1))

        # 2. QK normalization
        query = attn.norm_q(query)
        key = attn.norm_k(key)

        # 3. Rotary positional embeddings on the video stream
        if image_rotary_emb is not None:
            from diffusers.models.embeddings import apply_rotary_emb

            query = apply_rotary_emb(query, image_rotary_emb, sequence_dim=1)
            key = apply_rotary_emb(key, image_rotary_emb, sequence_dim=1)

        # 4. The text stream's projections and norms, appended after the video tokens
        if encoder_hidden_states is not None:
            encoder_query = attn.add_q_proj(encoder_hidden_states).unflatten(2, (attn.heads, -1))
            encoder_key = attn.add_k_proj(encoder_hidden_states).unflatten(2, (attn.heads, -1))
            encoder_value = attn.add_v_proj(encoder_hidden_states).unflatten(2, (attn.heads, -1))
            if attn.norm_added_q is not None:
                encoder_query = attn.norm_added_q(encoder_query)
            if attn.norm_added_k is not None:
                encoder_key = attn.norm_added_k(encoder_key)
            query = torch.cat([query, encoder_query], dim=1)
            key = torch.cat([key, encoder_key], dim=1)
            value = torch.cat([value, encoder_value], dim=1)

        # 5. Attention: the only change from the parent
        hidden_states = self._attend(query, key, value, attention_mask).flatten(2, 3).to(query.dtype)

        # 6. Output projections, split back into the two streams
        if encoder_hidden_states is not None:
            split = -encoder_hidden_states.shape[1]
            hidden_states, encoder_hidden_states = hidden_states[:, :split], hidden_states[:, split:]
            if getattr(attn, "to_out", None) is not None:
                hidden_states = attn.to_out[1](attn.to_out[0](hidden_states))
            if getattr(attn, "to_add_out", None) is not None:
                encoder_hidden_states = attn.to_add_out(encoder_hidden_states)
        return hidden_states, encoder_hidden_states

    def _attend(
        self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attention_mask: torch.Tensor | None
    ) -> torch.Tensor:
        """Attention over the joint (B, L, heads, dim) sequence; ``attention_mask`` is the text side's (B, N)."""
        from torch.nn.functional import pad

        mask = None
        if attention_mask is not None:
            video = query.shape[1] - attention_mask.shape[1]  # the video tokens come first and are always valid
            valid = self._valid_text_prefix(attention_mask)
            if valid is not None:
                key, value = key[:, : video + valid], value[:, : video + valid]
            else:
                keys = pad(attention_mask, (video, 0), value=True).bool()
                mask = keys.view(query.shape[0], 1, 1, query.shape[1])
        out: torch.Tensor = dispatch_attention_fn(
            query,
            key,
            value,
            attn_mask=mask,
            dropout_p=0.0,
            is_causal=False,
            backend=self._attention_backend,
            parallel_config=self._parallel_config,
        )
        return out

    def _valid_text_prefix(self, attention_mask: torch.Tensor) -> int | None:
        """The text tokens every row keeps, when the padded keys can be cut off here; None: mask them."""
        import torch

        # A compiled block must stay one graph of fixed shapes, and a context-parallel rank sees only its slice.
        if not self.slice_padding_tail or torch.compiler.is_compiling() or self._parallel_config is not None:
            return None
        return shared_valid_prefix(attention_mask)


class FittedImageProcessor(HunyuanVideo15ImageProcessor):  # type: ignore[misc]
    """diffusers' HunyuanVideo 1.5 image processor that keeps an image already on the VAE stride at its own size
    (the worker fitted it to the job's bucket); any other size gets diffusers' bucket."""

    def calculate_default_height_width(self, height: int, width: int, target_size: int) -> tuple[int, int]:
        stride = self.config.vae_scale_factor
        if height % stride == 0 and width % stride == 0:
            return height, width
        chosen: tuple[int, int] = super().calculate_default_height_width(height, width, target_size)
        return chosen
