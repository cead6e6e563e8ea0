"""Which job a debugger opens on: this process's job or session, else the job attached to.

Used by ``%distrain_debug``: the console follows the job's ``paused`` events,
so a job started elsewhere (another kernel, ``%distrain_attach``) is
attached to and its stream replayed, which rebuilds its paused ranks.
"""

from __future__ import annotations

import threading
import time

from ..backends import optional
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
    optional.RANKS.of(job.backend)  # MissingFeature naming the backend and what to do
    return job


#: The cell that stops each rank of a session in its last failed cell's frame.
LAST_CELL = (
    "from jupyter_disttrain.runtime import debugger as __distrain_debugger\n"
    "__distrain_debugger.post_mortem_last()\n"
    "del __distrain_debugger\n"
)


def debug_last(service: JobService, name: str, timeout: float = 60.0) -> Job:
    """Session ``name``'s group, with the ranks whose last cell failed stopped in the frame that
    raised (the session stays busy until they continue); :class:`BackendError` when none did."""
    try:
        session = service.session(name)
    except (SessionError, KeyError):
        raise BackendError(
            f"--last enters a session's last failed cell: {name!r} is not a session of this "
            "kernel (%distrain_session list)"
        ) from None
    job = session.job
    if job is None or job.done:
        raise BackendError(f"session {name} is not running; start it again")
    outcome: list[BaseException] = []

    def run() -> None:
        try:
            session.run(LAST_CELL)
        except BaseException as exc:  # shown to the user below, or once they continue
            outcome.append(exc)

    runner = threading.Thread(target=run, name="distrain-debug-last", daemon=True)
    runner.start()
    deadline = time.monotonic() + timeout
    while not job.paused() and runner.is_alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    if not job.paused():
        why = f": {outcome[0]}" if outcome else ""
        raise BackendError(f"no cell of session {name} has failed on any rank{why}")
    return job
