"""``api.server.serve``: what the process holds at start is out of the collector's view while serving."""

from __future__ import annotations

import gc

from api.server import serve


class _Server:
    """Stands in for uvicorn's server: records what the collector tracks when serving begins."""

    frozen = 0

    def run(self) -> None:
        self.frozen = gc.get_freeze_count()


def test_serving_begins_with_the_processs_objects_frozen() -> None:
    server = _Server()
    gc.unfreeze()
    try:
        serve(server)  # type: ignore[arg-type]
        assert server.frozen > 1000  # the modules, at the least
    finally:
        gc.unfreeze()  # the test process goes on collecting as usual
