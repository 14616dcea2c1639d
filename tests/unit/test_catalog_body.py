"""``GET /v1/models``'s body is computed at most once per ``REFRESH_S`` per process, whoever asks and however
many ask at once; each computation gets its own ETag."""

from __future__ import annotations

import threading

import anyio
import anyio.lowlevel

from api.catalog_body import REFRESH_S, CatalogBody


class SteppedClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_the_body_is_computed_once_per_refresh_however_many_ask_at_once() -> None:
    clock = SteppedClock()
    computed: list[int] = []
    release = threading.Event()

    async def compute() -> bytes:
        # every caller arrives while the first computation is still running
        await anyio.to_thread.run_sync(release.wait, 10)
        computed.append(len(computed))
        return b'{"data": [%d]}' % len(computed)

    catalog = CatalogBody(compute, clock=clock)

    async def main() -> list[tuple[bytes, str]]:
        answers: list[tuple[bytes, str]] = []

        async def ask() -> None:
            answers.append(await catalog.get())

        async with anyio.create_task_group() as group:
            for _ in range(50):
                group.start_soon(ask)
            for _ in range(100):  # let every asker reach the lock or the running computation
                await anyio.lowlevel.checkpoint()
            release.set()
        answers.append(await catalog.get())
        clock.now += REFRESH_S * 0.9
        answers.append(await catalog.get())  # still fresh
        clock.now += REFRESH_S * 0.2
        answers.append(await catalog.get())  # a second old: computed again
        return answers

    answers = anyio.run(main)
    assert computed == [0, 1]
    assert {a for a in answers[:-1]} == {answers[0]}
    assert answers[-1][0] == b'{"data": [2]}' and answers[-1][1] != answers[0][1]
