"""A job's checkpoint list for the sidebar.

Only the job's own checkpoint directory is read: the one its backend
recorded when the job was submitted (a local job's ``--checkpoint-dir``, else
its job directory's ``checkpoints`` folder). It is listed with
:class:`~jupyter_disttrain.checkpoints.CheckpointStore`, which also says
whether each one is complete. The checkpoints the ranks reported are shown
as ``reported`` when there is no such directory or it cannot be read; a URI
named in a reported line is displayed, never opened: a log line is printed
text, and the server fetches nothing a log names.
"""

from __future__ import annotations

from ..backends.base import Backend, JobRecord
from .views import CheckpointJSON


def list_checkpoints(
    record: JobRecord, backend: Backend, reported: list[CheckpointJSON]
) -> list[CheckpointJSON]:
    """The checkpoints of the job's recorded directory by step, else ``reported`` (never raises)."""
    try:
        from ..checkpoints.jobs import record_checkpoint_dir
        from ..checkpoints.store import CheckpointStore

        uri = record_checkpoint_dir(record, backend)
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
