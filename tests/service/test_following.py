"""Following a listed job (service/following.py): its monitor reads it as its kernel's does."""

from __future__ import annotations

import os
import time
import uuid

from jupyter_disttrain import events as ev
from jupyter_disttrain.backends.local import LocalBackend, jobdir
from jupyter_disttrain.service.following import open_monitor


def running_job(max_restarts: int) -> str:
    """A running local job's directory (its owner is this process); its name."""
    name = f"follow-{uuid.uuid4().hex[:8]}"
    directory = jobdir.job_dir(name)
    jobdir.make_private_dirs(jobdir.logs_dir(directory))
    state = {
        "name": name,
        "state": "Running",
        "nodes": 2,
        "nproc": 1,
        "world_size": 2,
        "created": time.time(),
        "owner_pid": os.getpid(),
        "max_restarts": max_restarts,
    }
    jobdir.write_json_atomic(directory / "state.json", state)
    return name


def test_a_followed_job_with_a_restart_left_reads_restarting_after_a_failure() -> None:
    """The sidebar's reading of a job torchrun will restart is its kernel's: not Failed."""
    backend = LocalBackend()
    for budget, expected in ((1, "Restarting"), (0, "Failed")):
        name = running_job(budget)
        [record] = [r for r in backend.list_jobs() if r.name == name]
        assert record.max_restarts == budget
        monitor, submission = open_monitor(backend, record)
        assert monitor is not None and submission is not None
        try:
            now = time.time()
            monitor.feed_many(
                [
                    ev.job_event("Running", t=now),
                    *[ev.Event("hello", r, now, {"pid": 100 + r}) for r in range(2)],
                    ev.Event("error", 1, now + 1, {"type": "ValueError", "message": "bad"}),
                ]
            )
            assert monitor.display_state == expected, (budget, monitor.reason)
        finally:
            submission.stop()
