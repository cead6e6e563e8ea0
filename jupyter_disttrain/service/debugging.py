"""Which job a debugger opens on: this process's job or session, else the job attached to.

Used by ``%distrain_debug``: the console follows the job's ``paused`` events,
so a job started elsewhere (another kernel, ``%distrain_attach``) is
attached to and its stream replayed, which rebuilds its paused ranks.
"""

from __future__ import annotations

from ..backends.base import BackendError
from ..job import Job
from ..sessions import SessionError
from .core import JobService


def debug_job(service: JobService, name: str, backend: str | None = None) -> Job:
    """The :class:`Job` named ``name`` to debug; :class:`BackendError` naming the fix."""
    mine = service.registered().get(name)
    if mine is not None and (backend is None or mine.backend.name == backend):
        return mine
    try:
        session = service.session(name)
    except SessionError:
        session = None
    if session is not None and session.job is not None:
        return session.job
    job = service.attach(name, backend)
    if not job.backend.capabilities.reaches_ranks:
        raise BackendError(f"the {job.backend.name} backend cannot reach a rank's debugger")
    return job
