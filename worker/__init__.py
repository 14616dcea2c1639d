"""genworker's worker side, bottom to top: ``core`` (the shared vocabulary), the backends ``queue``,
``stores`` and ``media`` (encoder), ``settings`` (the one Settings object) and ``daemon`` (the worker
process). ``docs/architecture.md`` draws the layers; ``[tool.importlinter]`` enforces them.
"""
