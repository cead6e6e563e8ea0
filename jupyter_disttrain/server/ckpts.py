"""A job's checkpoint list for the sidebar.

The job's checkpoint directory (the directory of the checkpoints its ranks
reported, else a local job's default directory) is listed with
:class:`~jupyter_disttrain.checkpoints.CheckpointStore`, which also says
whether each one is complete. When there is no such directory or it cannot
be read, the checkpoints the ranks reported are shown as ``reported``.
"""

from __future__ import annotations

import os

from ..backends.base import JobRecord
from .views import CheckpointJSON


def checkpoint_dir(record: JobRecord, reported: list[CheckpointJSON]) -> str | None:
    """Where the job's checkpoints are, or None when unknown."""
    if reported and "/" in reported[-1]["uri"]:
        return reported[-1]["uri"].rstrip("/").rsplit("/", 1)[0]
    if record.backend == "local":
        from ..checkpoints import default_dir

        path = default_dir(record.name)
        return path if os.path.isdir(path) else None
    return None


def list_checkpoints(record: JobRecord, reported: list[CheckpointJSON]) -> list[CheckpointJSON]:
    """The checkpoints of the job's directory by step, else ``reported`` (never raises)."""
    try:
        from ..checkpoints import CheckpointStore

        uri = checkpoint_dir(record, reported)
        if uri is None:
            return reported
        infos = CheckpointStore(uri).list()
    except Exception:  # unreadable, or not a checkpoint directory: show what was reported
        return reported
    if not infos:
        return reported
    return [
        CheckpointJSON(step=c.step, uri=c.uri, bytes=c.bytes, rank=None, t=c.time, status=c.status)
        for c in infos
    ]
