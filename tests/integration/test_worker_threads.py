"""worker/loop.py names every thread the worker starts (issue 37): a worker run in this process, on SQLite and the
local store, takes one tiny job that checkpoints after every step, and each thread started meanwhile is caught as it
starts (``threading.settrace`` runs in every new thread before its target) and compared with the list."""

from __future__ import annotations

import re
import sys
import threading
from pathlib import Path
from types import FrameType
from typing import Any

import yaml

import worker.loop
from foundation.core.catalog import load_catalog
from foundation.core.contract import Status
from foundation.queue.factory import open_queue
from foundation.settings import Settings
from tests.integration.worker_harness import free_port, make_record, wait_for, write_test_catalog
from worker.lifecycle import Shutdown

# "- **name** —" at the start of a line of the module docstring's thread list.
LISTED = re.compile(r"^- \*\*([a-z-]+)\*\* —", re.MULTILINE)


def listed_threads() -> list[str]:
    return LISTED.findall(worker.loop.__doc__ or "")


def _checkpointing_catalog(path: Path) -> Path:
    """The test catalog with tiny-wan checkpointing after every step (so its writer thread starts)."""
    data = yaml.safe_load(write_test_catalog(path).read_text(encoding="utf-8"))
    for model in data["models"]:
        if model["id"] == "tiny-wan":
            model["checkpoints"] = {"every_steps": 1}
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


def test_the_loop_lists_every_thread_a_running_worker_starts(tmp_path: Path, tiny_models_dir: Path) -> None:
    catalog_path = _checkpointing_catalog(tmp_path / "catalog.yaml")
    settings = Settings.model_validate(
        {
            "data_dir": str(tmp_path / "data"),
            "catalog_path": str(catalog_path),
            "models": {"tiny_models_dir": str(tiny_models_dir)},
            "worker": {
                "hosted_models": ["tiny-wan"],
                "preload": ["tiny-wan"],
                "metrics_port": free_port(),
                "overlap_stage_write": True,  # starts the progress thread, off by default
            },
        }
    )
    started: list[str] = []

    def note_start(frame: FrameType, event: str, arg: Any) -> None:
        """Called once as each new thread starts: notes it and leaves that thread untraced."""
        sys.settrace(None)
        started.append(threading.current_thread().name)  # list.append is atomic

    shutdown, codes = Shutdown(), []
    before = set(threading.enumerate())
    threading.settrace(note_start)  # type: ignore[arg-type]
    try:
        main = threading.Thread(
            target=lambda: codes.append(worker.loop.run_worker(settings, install_signals=False, shutdown=shutdown)),
            name="main",  # the thread that runs run_worker is the worker's main thread
        )
        main.start()
        queue = open_queue(settings.queue)
        record = queue.enqueue(make_record(load_catalog(catalog_path), "tiny-wan")).record
        done, _ = wait_for(queue, record.id, lambda r: r.terminal, timeout_s=180)
        assert done.status is Status.succeeded, done.error
        running = {thread.name for thread in threading.enumerate() if thread not in before}
        shutdown.request_drain("test over")
        main.join(timeout=60)
        assert codes == [0]
    finally:
        threading.settrace(None)  # type: ignore[arg-type]
        shutdown.request_stop("test over")

    # A library's unnamed pool (diffusers and transformers load weights on a few threads): it ends with the load.
    loaders = {name for name in started if name.startswith("ThreadPoolExecutor-")}
    assert not loaders & running, "a loading pool outlived the load"
    ours = [re.sub(r"_\d+$", "", name) for name in started if name not in loaders]  # an executor's: <prefix>_<n>
    assert sorted(ours) == sorted(listed_threads())  # each listed thread started, once, and no other
    assert running <= {name for name in started if name not in loaders}  # what runs at a job's end is listed
