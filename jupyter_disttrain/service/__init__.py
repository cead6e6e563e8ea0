"""The one job service: plan, run, attach, list, logs, stop, checkpoints and runtimes.

The magics, the ``disttrain`` command and the server extension are argument
parsing and display over :class:`JobService`; none of them builds payloads
or picks backend classes itself. A job's life here:

    spec = service.spec(args)                      # options -> validated JobSpec
    plan = service.plan(spec, source, namespace)   # payload + backend.plan: printable
    job = service.run(plan, listeners)             # submits exactly that plan
    service.run_and_follow(plan, view, wait=True)  # or: run, show, wait, Ctrl-C stops
    service.run_cell_and_follow(session, source, view)  # a cell on a session's ranks, shown

Listing goes through :mod:`.listing` (time limits and a cache per
:class:`~.listing.ListPolicy`), following listed jobs without a dashboard
and attaching to a job through :mod:`.following`, the run flow of the doors
(plans and session cells) through :mod:`.running`,
default job names through :mod:`.naming`. Backends are told apart by their
declared :class:`~jupyter_disttrain.backends.base.Capabilities`, never by name.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable

from ..backends.base import Backend
from ..backends.registry import backend_class, names
from ..job import Job
from ..payload import Payload
from ..spec import JobSpec
from .core import JobService, Listener
from .following import CATCH_UP, REPLAY_WAIT
from .listing import Listing, ListPolicy
from .logtext import BoundedLogs
from .running import RunOutcome, RunView

__all__ = [
    "CATCH_UP",
    "REPLAY_WAIT",
    "BoundedLogs",
    "JobService",
    "ListPolicy",
    "Listener",
    "Listing",
    "RunOutcome",
    "RunView",
    "attach",
    "backend_names",
    "default_service",
    "export_backends",
    "registered",
    "stop_all",
    "submit",
]


def backend_names() -> tuple[str, ...]:
    """Every backend a job can name, the default first."""
    return names()


def export_backends() -> list[str]:
    """Backends whose plans are files to apply elsewhere (``--export``, ``render``)."""
    return [n for n in names() if backend_class(n).capabilities.exports_plans]


_default: JobService | None = None
_default_lock = threading.Lock()


def default_service() -> JobService:
    """This process's service (the magics, the command and the Python API share it)."""
    global _default
    with _default_lock:
        if _default is None:
            _default = JobService()
        return _default


def submit(
    spec: JobSpec,
    payload: Payload,
    backend: Backend | None = None,
    listeners: Iterable[Listener] = (),
) -> Job:
    """Start ``spec`` with a built payload; ``backend`` overrides the service's instance."""
    service = default_service()
    if backend is None:
        return service.submit(spec, payload, listeners)
    return service._start(Job(spec, backend, plan=backend.plan(spec, payload)), listeners)


def attach(
    name: str, backend: Backend | str | None = None, listeners: Iterable[Listener] = ()
) -> Job:
    """Follow an existing job (see :meth:`JobService.attach`)."""
    return default_service().attach(name, backend, listeners)


def registered() -> dict[str, Job]:
    """Jobs of this process, by name."""
    return default_service().registered()


def stop_all(timeout: float = 30.0) -> None:
    """Stop every running job of this process (kernel shutdown)."""
    default_service().stop_all(timeout)
