"""Model families behind one adapter contract (``pipelines.runtime.adapter``), loaded lazily from the catalog.

Modules: ``adapter`` (the Adapter protocol: ``denoise`` to the family's ``Latents``, ``decode`` to
``foundation.core.media.Media``), ``registry`` (catalog entry -> adapter, weights, device),
``cache`` (ModelCache), ``wan``, ``wan_i2v`` and ``ltx2`` (the families), ``generic`` (any diffusers
text-to-video pipeline of the common call shape, driven by the catalog entry's ``diffusers`` block),
``prompt_extend`` (extension and fallback),
``runtime`` (GPU knobs, shape checks, uint8 frames and the Media build, audio fitting), ``tiny`` (offline
tiny-model builders; ``tiny_generic`` those of the generic families).

Importing this package (or registry/cache) never imports diffusers, transformers or torch; adapters do it
inside ``load``. Nothing here touches Redis, S3 or HTTP.
"""
