"""Model families behind one adapter contract (``pipelines.adapter``), loaded lazily from the catalog.

Modules: ``adapter`` (the Adapter protocol; the Media it returns is ``worker.core.media``), ``registry``
(catalog entry -> adapter, weights, device),
``cache`` (ModelCache), ``wan`` and ``ltx2`` (the families), ``prompt_extend`` (extension and fallback),
``runtime`` (GPU knobs, uint8 frames, audio fitting), ``tiny`` (offline tiny-model builders).

Importing this package (or registry/cache) never imports diffusers, transformers or torch; adapters do it
inside ``load``. Nothing here touches Redis, S3 or HTTP.
"""
