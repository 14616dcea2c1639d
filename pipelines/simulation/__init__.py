"""Catalog models at full size without weights: the production adapters over random components
(``random_pipelines``), and every job run on the CPU under fake tensors (``simulate``)."""
