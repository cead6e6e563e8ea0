"""A job's logs cut for a viewer (service/logtext.py): what an empty log says."""

from __future__ import annotations

import uuid

from jupyter_disttrain.backends.base import JobRecord
from jupyter_disttrain.backends.local import LocalBackend, jobdir
from jupyter_disttrain.service.logtext import bounded_logs


def quiet_job() -> str:
    """A local job directory whose one rank printed nothing; its name."""
    name = f"quiet-{uuid.uuid4().hex[:8]}"
    directory = jobdir.job_dir(name)
    jobdir.make_private_dirs(jobdir.logs_dir(directory))
    state = {"name": name, "state": "Succeeded", "nodes": 1, "nproc": 1, "world_size": 1}
    jobdir.write_json_atomic(directory / "state.json", state)
    jobdir.write_private(jobdir.logs_dir(directory) / "rank-0.log", b"")
    return name


def test_an_empty_log_says_no_output_yet_while_running_and_no_output_once_ended() -> None:
    name = quiet_job()
    backend = LocalBackend()
    for state, said in (
        ("Running", "no output yet"),
        ("Succeeded", "no output"),
        ("Failed", "no output"),
        ("Stopped", "no output"),
    ):
        record = JobRecord(name, "local", state, 1, 1, 1, created=0.0)
        logs = bounded_logs(backend, record, None, None)
        assert (logs.text, logs.message) == ("", said), (state, logs)
