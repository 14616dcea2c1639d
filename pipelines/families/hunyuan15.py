"""HunyuanVideo 1.5's joint attention without the dense L x L mask (diffusers ``HunyuanVideo15Transformer3DModel``).

HunyuanVideo 1.5 is served by the generic adapter (``pipelines.families.generic``); its catalog block names this
processor (``diffusers.attention_processor``), which the adapter puts in place of diffusers' own at load.

Model facts behind it (diffusers 0.42.1 ``models/transformers/transformer_hunyuan_video15.py``):
- each of the 54 double-stream blocks attends over one sequence: the video tokens, then 1,985 text-side tokens
  (729 SigLIP image slots, 256 byT5 and 1,000 Qwen2.5-VL tokens, always padded to those lengths); the
  transformer reorders the text side so its valid tokens come first and the padding last;
- ``HunyuanVideo15AttnProcessor2_0`` turns the (B, L) key-padding mask into a dense (B, 1, L, L) bool mask on
  every call (``mask_q & mask_k``): L = 50,345 at 832x480 x 121 frames, so two L^2-byte tensors (4.7 GiB) in the
  processor, and SDPA's memory-efficient kernel turns a bool mask into an additive one of its own shape (another
  2 L^2 bytes, padded to an 8-aligned last dimension: one more copy). At 720p x 121 frames (L = 113,585) that is
  over 48 GiB per attention call, on top of the weights;
- the mask only needs to hide padded *keys*: a padded query row's output is a padded text token's, which no
  valid token ever attends to (it is masked as a key in every block) and which never reaches the output
  (``proj_out`` reads the video tokens only). So a (B, 1, 1, L) mask broadcast over the queries gives the video
  and valid text tokens exactly what the dense mask gives them. SDPA broadcasts it without copying (the boolean
  conversion and the alignment padding apply to the (B, 1, 1, L) tensor, then it is expanded as a view), and
  diffusers' varlen backends reduce either shape to per-key lengths.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from diffusers.models.attention_dispatch import dispatch_attention_fn
from diffusers.models.transformers.transformer_hunyuan_video15 import HunyuanVideo15AttnProcessor2_0

if TYPE_CHECKING:
    import torch

__all__ = ["KeyPaddingAttnProcessor"]


class KeyPaddingAttnProcessor(HunyuanVideo15AttnProcessor2_0):  # type: ignore[misc]
    """diffusers' HunyuanVideo 1.5 processor with a (B, 1, 1, L) key-padding mask instead of the (B, 1, L, L) one.

    The rest is the parent's ``__call__`` unchanged: projections, QK norms, rotary embedding on the video stream,
    the text stream's projections, one attention call, the output projections."""

    # The diffusers processor this one stands in for (the generic adapter replaces exactly its instances).
    replaces = HunyuanVideo15AttnProcessor2_0

    def __call__(
        self,
        attn: Any,
        hidden_states: torch.Tensor,
        encoder_hidden_states: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        image_rotary_emb: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        import torch
        from torch.nn.functional import pad

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

        # 5. Attention. The only change: the video tokens (always valid) are prepended to the text-side mask as
        # the parent does, and the mask stays one row per batch, broadcast over every query.
        if attention_mask is not None:
            batch_size, seq_len = query.shape[0], query.shape[1]
            keys = pad(attention_mask, (seq_len - attention_mask.shape[1], 0), value=True).bool()
            attention_mask = keys.view(batch_size, 1, 1, seq_len)
        hidden_states = dispatch_attention_fn(
            query,
            key,
            value,
            attn_mask=attention_mask,
            dropout_p=0.0,
            is_causal=False,
            backend=self._attention_backend,
            parallel_config=self._parallel_config,
        )
        hidden_states = hidden_states.flatten(2, 3).to(query.dtype)

        # 6. Output projections, split back into the two streams
        if encoder_hidden_states is not None:
            split = -encoder_hidden_states.shape[1]
            hidden_states, encoder_hidden_states = hidden_states[:, :split], hidden_states[:, split:]
            if getattr(attn, "to_out", None) is not None:
                hidden_states = attn.to_out[1](attn.to_out[0](hidden_states))
            if getattr(attn, "to_add_out", None) is not None:
                encoder_hidden_states = attn.to_add_out(encoder_hidden_states)
        return hidden_states, encoder_hidden_states
