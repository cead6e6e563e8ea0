"""A job's checkpoint list for the sidebar.

The job's checkpoint directory (the directory of the checkpoints its ranks
reported, else a local job's default directory) is listed with
:class:`~jupyter_disttrain.checkpoints.CheckpointStore`, which also says
whether each one is complete. When there is no such directory or it cannot
be read, the checkpoints the ranks reported are shown as ``reported``.
"""

from __future__ import annotations

from ..backends.base import Backend, JobRecord
from .views import CheckpointJSON


def list_checkpoints(
    record: JobRecord, backend: Backend, reported: list[CheckpointJSON]
) -> list[CheckpointJSON]:
    """The checkpoints of the job's directory by step, else ``reported`` (never raises)."""
    try:
        from ..checkpoints import CheckpointStore
        from ..job_checkpoints import record_checkpoint_dir

        uri = record_checkpoint_dir(record, backend, [c["uri"] for c in reported])
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
