"""``wait`` against the real server: the poll cadence, the server's Retry-After, the timeout.

The server (see conftest) answers ``Retry-After: 0`` while a generation is younger than 2 s and
``Retry-After: 1`` after that. The client's own cadence here is 0.2 s, then 0.3-0.45 s with jitter.
So one wait sees both regimes: early on the client's jittered cadence decides, later the server's hint.
The rule checked, exactly: delay before poll k = max(own_k, Retry-After of answer k-1), where own_0 =
first_poll_s and own_k = uniform(poll_min_s, poll_max_s) from the client's rng; and the request really
leaves that long after the previous answer came back.
"""

from __future__ import annotations

import random
import time
import uuid
from dataclasses import dataclass

import pytest

from genworker_client import Generation, WaitTimeout
from tests.client.conftest import (
    NEVER_RUNS_MODEL,
    RETRY_AFTER_EARLY_S,
    RETRY_AFTER_LATE_S,
    RETRY_AFTER_WINDOW_S,
    Server,
)
from tests.client.recording import RecordingTransport

FIRST_S, MIN_S, MAX_S = 0.2, 0.3, 0.45
# The client runs on its own clock, moved only by its sleeps (``ClientTime``): round trips cost it nothing, so it
# never runs ahead of the server's. The first answer after the server's early window then comes at most MAX_S of
# the client's time after the window closed, and a full late delay after it still ends before this deadline.
TIMEOUT_S = RETRY_AFTER_WINDOW_S + 2 * RETRY_AFTER_LATE_S + MAX_S
SEED = 1234


@dataclass(frozen=True)
class Slept:
    requested: float
    started: float  # time.monotonic() around the real sleep, on the transport's clock
    ended: float


class ClientTime:
    """The client's ``clock`` and ``sleep``: each sleep is slept for real (the server's Retry-After follows
    real time) and noted, and the clock moves by exactly what was asked. The deadline is then exact: it falls
    at the end of the sleep cut to it, however long this machine takes for a round trip."""

    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[Slept] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        started = time.monotonic()
        time.sleep(seconds)
        self.sleeps.append(Slept(seconds, started, time.monotonic()))
        self.now += seconds


def test_wait_follows_the_cadence_and_honours_retry_after(server: Server) -> None:
    transport = RecordingTransport()
    client_time = ClientTime()
    polled: list[Generation] = []
    client = server.client(
        transport=transport, sleep=client_time.sleep, clock=client_time.clock, rng=random.Random(SEED)
    )
    with client:
        created = client.create(NEVER_RUNS_MODEL, f"cadence {uuid.uuid4().hex}")
        with pytest.raises(WaitTimeout) as caught:
            client.wait(
                created,
                timeout_s=TIMEOUT_S,
                on_progress=polled.append,
                first_poll_s=FIRST_S,
                poll_min_s=MIN_S,
                poll_max_s=MAX_S,
                stream=False,  # the polling path itself (the stream is tests/e2e/test_events_stream.py)
            )
        client.cancel(created.id)
    sleeps = [s.requested for s in client_time.sleeps]

    # The timeout: raised at the deadline on the client's clock (the last sleep is cut to it), with the last record.
    assert client_time.now == TIMEOUT_S
    assert caught.value.last is polled[-1]
    assert caught.value.last.status == "queued"

    # Both server regimes were seen, so both halves of the max() rule were exercised.
    sent = [created.retry_after_s] + [g.retry_after_s for g in polled]
    hints = [h for h in sent if h in (RETRY_AFTER_EARLY_S, RETRY_AFTER_LATE_S)]
    assert hints == sent, f"unexpected Retry-After values {sent}"
    assert RETRY_AFTER_EARLY_S in hints and RETRY_AFTER_LATE_S in hints

    # The requested sleeps, one per poll, follow the rule exactly (the last one is cut to the deadline).
    twin = random.Random(SEED)
    own = [FIRST_S] + [twin.uniform(MIN_S, MAX_S) for _ in range(len(sleeps) - 1)]
    expected = [max(o, h) for o, h in zip(own, hints, strict=False)]
    assert len(sleeps) == len(polled)
    assert sleeps[:-1] == expected[: len(sleeps) - 1]
    assert 0 < sleeps[-1] <= expected[len(sleeps) - 1]
    assert any(MIN_S <= s <= MAX_S and s not in (MIN_S, MAX_S) for s in sleeps), "jitter never decided a delay"
    assert sleeps.count(float(RETRY_AFTER_LATE_S)) >= 1, "the server's Retry-After never decided a delay"

    # On the wire, in order: each GET left after its whole sleep, and that sleep began after the previous answer
    # came back; nothing else came between. So each request left no sooner than the rule says, and the client
    # added no wait of its own (how much later than due is this machine's business, not the client's).
    exchanges = transport.exchanges
    assert [e.method for e in exchanges] == ["POST"] + ["GET"] * len(polled) + ["POST"]
    for previous, poll, slept in zip(exchanges[:-2], exchanges[1:-1], client_time.sleeps, strict=True):
        assert previous.answered <= slept.started and slept.ended <= poll.started
        assert slept.ended - slept.started >= slept.requested, "a sleep ended before its time"


def test_wait_returns_at_once_for_a_terminal_record(server: Server) -> None:
    """A record that is already terminal is not polled again (nothing could change)."""
    transport = RecordingTransport()
    terminal = Generation.model_validate({"id": "gen_given", "status": "failed"})
    with server.client(transport=transport) as client:
        assert client.wait(terminal, timeout_s=1.0) is terminal
    assert transport.exchanges == []
