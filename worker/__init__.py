"""The worker daemon: claim -> load -> extend -> denoise -> decode -> encode -> upload -> report.

``loop`` (the claim loop and its threads), ``context`` (what a worker process builds once at start),
``runner`` (the GPU side of one job, through ``pipeline_run``: load -> extend -> denoise -> decode
with the OOM retry, shared with ``genworker generate``), ``postprocess`` (encode, upload, finish;
overlapped with the next job), ``attempt`` and ``verdict`` (how an attempt ends), ``progress`` and
``lease`` (fenced writes and renewals), ``health``/``metrics``/``logs`` (operations), ``lifecycle``
(signals), ``generate`` and ``cli`` (``genworker worker`` and ``genworker generate``). It imports
``pipelines`` and ``foundation`` and is imported only by the root command; ``docs/architecture.md``
draws the layers and ``[tool.importlinter]`` enforces them.
"""
