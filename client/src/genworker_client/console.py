"""``genworker-client``: the console script of ``pip install './client[cli]'``.

The same commands as ``genworker client ...`` of the server distribution (``cli.py``). The script is
installed with the bare client too, where typer and rich are absent: it then says which extra to add
instead of failing with an import error.
"""

from __future__ import annotations

import sys

__all__ = ["main"]


def main() -> None:
    try:
        from genworker_client.cli import app
    except ModuleNotFoundError as e:  # typer or rich: the `cli` extra
        # genworker-client is on no package index: the extra is installed from the checkout's client/ folder.
        sys.exit(
            f"genworker-client needs the cli extra: pip install './client[cli]' from the checkout (missing: {e.name})"
        )
    app(prog_name="genworker-client")
