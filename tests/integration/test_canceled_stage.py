"""A canceled job ends with a terminal stage (``done``), on both real queue backends: canceled while
queued, canceled by the worker at a step, and canceled when its lease lapsed after the request."""

from __future__ import annotations

from collections.abc import Callable

from foundation.core.contract import Stage, Status
from foundation.queue.base import JobQueue, Outcome
from tests.integration import queue_support
from tests.integration.queue_support import new_record

make_queue = queue_support.make_queue
queue = queue_support.queue


def test_a_job_canceled_while_queued_is_not_left_at_stage_queued(queue: JobQueue) -> None:
    record = queue.enqueue(new_record()).record
    assert record.stage is Stage.queued
    canceled = queue.cancel(record.id)
    stored = queue.get(record.id)
    assert canceled.status is Status.canceled and canceled.stage is Stage.done
    assert stored is not None and (stored.status, stored.stage) == (Status.canceled, Stage.done)


def test_a_job_canceled_at_a_step_ends_at_stage_done_with_its_progress(
    make_queue: Callable[..., JobQueue],
) -> None:
    api, worker = make_queue(), make_queue()
    record = api.enqueue(new_record()).record
    claim = worker.claim("w1", ["tiny-wan"])
    assert claim is not None
    assert worker.progress(claim, Stage.denoising, 0.4)
    api.cancel(record.id)
    assert worker.finish(claim, Outcome(status=Status.canceled))
    done = api.get(record.id)
    assert done is not None and (done.status, done.stage) == (Status.canceled, Stage.done)
    assert done.progress == 0.4  # how far it got is kept
