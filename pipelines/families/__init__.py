"""One self-contained module per model family, each behind the ``Adapter`` contract
(``pipelines.runtime.adapter``), named by the catalog (``adapter: pipelines.families.wan:WanTextToVideo``)."""
