"""``python -m genworker``: the same command tree as the ``genworker`` console script."""

from genworker.cli import app

app()
