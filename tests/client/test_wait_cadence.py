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
# The deadline leaves room for two of the server's late delays after its early window and one more of our own:
# the first late answer comes up to MAX_S plus a round trip or two after the window closes, and the delay it
# decides must still end before the deadline (else it is cut to the deadline and no delay is the server's).
# With 3.5 s that held only while a round trip took under ~0.1 s: at 0.26 s (make test-stress) it was cut.
TIMEOUT_S = RETRY_AFTER_WINDOW_S + 2 * RETRY_AFTER_LATE_S + MAX_S
SEED = 1234
# How late a request may leave after its sleep ends: Python overhead on a busy 2-core CI box.
LATENESS_S = 0.25


def test_wait_follows_the_cadence_and_honours_retry_after(server: Server) -> None:
    transport = RecordingTransport()
    sleeps: list[float] = []

    def recording_sleep(seconds: float) -> None:
        sleeps.append(seconds)
        time.sleep(seconds)

    polled: list[Generation] = []
    with server.client(transport=transport, sleep=recording_sleep, rng=random.Random(SEED)) as client:
        created = client.create(NEVER_RUNS_MODEL, f"cadence {uuid.uuid4().hex}")
        started = time.monotonic()
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
        waited = time.monotonic() - started
        client.cancel(created.id)

    # The timeout: raised at the deadline (the last sleep is cut to it), with the last record.
    assert TIMEOUT_S <= waited < TIMEOUT_S + 0.5
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
    assert len(sleeps) == len(polled) >= 6
    assert sleeps[:-1] == expected[: len(sleeps) - 1]
    assert 0 < sleeps[-1] <= expected[len(sleeps) - 1]
    assert any(MIN_S <= s <= MAX_S and s not in (MIN_S, MAX_S) for s in sleeps), "jitter never decided a delay"
    assert sleeps.count(float(RETRY_AFTER_LATE_S)) >= 1, "the server's Retry-After never decided a delay"

    # On the wire: each GET left its sleep's length after the previous answer, never sooner.
    exchanges = transport.exchanges
    assert [e.method for e in exchanges] == ["POST"] + ["GET"] * len(polled) + ["POST"]
    for previous, poll, slept in zip(exchanges[:-2], exchanges[1:-1], sleeps, strict=True):
        gap = poll.started - previous.answered
        assert slept <= gap + 0.002, f"polled {gap:.3f} s after the last answer, sooner than the {slept:.3f} s rule"
        assert gap <= slept + LATENESS_S, f"polled {gap:.3f} s after the last answer, {slept:.3f} s was due"


def test_wait_returns_at_once_for_a_terminal_record(server: Server) -> None:
    """A record that is already terminal is not polled again (nothing could change)."""
    transport = RecordingTransport()
    terminal = Generation.model_validate({"id": "gen_given", "status": "failed"})
    with server.client(transport=transport) as client:
        assert client.wait(terminal, timeout_s=1.0) is terminal
    assert transport.exchanges == []
