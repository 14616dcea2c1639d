"""The shared bottom of the house, which the API tier and the workers both stand on, bottom to top:
``core`` (the vocabulary: the job contract, errors, the catalog, parameter resolution, sizes, media
types), the backends ``queue``, ``stores`` and ``media`` (the encoder), and ``settings`` (the one
``Settings`` object). It imports nothing above it; ``docs/architecture.md`` draws the layers and
``[tool.importlinter]`` enforces them.
"""
