"""Every job of a backend's scope, whoever started it (``--all``), and stopping one safely.

A foreign job (one this tool did not start: a Kubeflow SDK TrainJob, a
pipeline's, a colleague's) is listed and followed read-only. Stopping it
needs the user's RBAC to allow it (asked of the backend, as ``kubectl auth
can-i`` would) and an explicit confirmation, since it is someone's work.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

from ..backends import optional
from ..backends.base import Backend, BackendError, JobNotFound, JobRecord
from ..events import TERMINAL_STATES
from .listing import Listing, newest_first


class StopRefused(BackendError):
    """RBAC does not let this user stop the job."""


def list_namespace(backends: Iterable[Backend]) -> Listing:
    """Every job of ``backends`` (:func:`scope_records`), newest
    first; a backend that fails is reported in ``errors``, the others are still listed."""
    listing = Listing(backends=list(backends))
    for backend in listing.backends:
        try:
            listing.add(backend, scope_records(backend))
        except Exception as exc:  # one backend's failure stays its own
            listing.errors[backend.name] = str(exc) or type(exc).__name__
    listing.records = newest_first(listing.records)
    return listing


def scope_records(backend: Backend) -> list[JobRecord]:
    """Every job of ``backend``'s scope, whoever started it, where it can list them
    (:class:`~..backends.optional.ListsNamespace`); else its own jobs."""
    if optional.NAMESPACE.has(backend):
        return optional.NAMESPACE.of(backend).list_namespace()
    return backend.list_jobs()


def may_stop(backend: Backend, name: str) -> bool | None:
    """Whether this user may stop job ``name`` of ``backend`` (None: it cannot tell)."""
    if optional.NAMESPACE.has(backend):
        return optional.NAMESPACE.of(backend).may_stop(name)
    return None


def is_foreign(record: JobRecord) -> bool:
    """True for a job this tool did not start."""
    return record.facts.foreign


def record_of(backend: Backend, name: str) -> JobRecord | None:
    """Job ``name`` among every job of ``backend``'s scope, or None."""
    return next((r for r in scope_records(backend) if r.name == name), None)


def holder(backends: Iterable[Backend], name: str) -> Backend | None:
    """The first of ``backends`` whose scope has a job ``name`` (one that cannot list is
    passed over), or None."""
    for backend in backends:
        try:
            if record_of(backend, name) is not None:
                return backend
        except Exception:  # an unreachable cluster does not hide the others' jobs
            continue
    return None


def first_found(
    backends: list[str], name: str, find: Callable[[str, str], tuple[Backend, JobRecord]]
) -> tuple[Backend, JobRecord]:
    """``find(backend, name)`` of the first of ``backends`` that has job ``name``; raises
    :class:`JobNotFound` naming every backend asked when none has it."""
    for backend in backends:
        try:
            return find(backend, name)
        except JobNotFound:
            continue
    where = " or ".join(backends) or "any configured backend"
    raise JobNotFound(f"no job named {name!r} on {where}: list every job there for their names")


def check_stop(backend: Backend, record: JobRecord) -> None:
    """Raise :class:`StopRefused` when ``record`` is a foreign job this user's RBAC does
    not let them delete; return otherwise (this tool's jobs may always be stopped)."""
    if not is_foreign(record) or may_stop(backend, record.name) is not False:
        return
    kind = record.facts.workload or "job"
    raise StopRefused(
        f"{record.name} is read-only here: your Kubernetes RBAC does not allow deleting this "
        f"{kind} (ask for 'delete' on it in your namespace; docs/rbac.yaml lists the rules)"
    )


class StopRights:
    """Whether listed jobs may be stopped, asked of the backend once per ``seconds`` per
    backend and kind (RBAC is granted per kind, and a listing shows many jobs)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, seconds: float = 60.0):
        self.clock = clock
        self.seconds = seconds
        self._known: dict[tuple[str, str], tuple[float, bool]] = {}

    def allows(self, backend: Backend, record: JobRecord) -> bool:
        """Whether this user may stop ``record`` (an ended or own job: True)."""
        if record.state in TERMINAL_STATES or not is_foreign(record):
            return True
        key = (backend.name, record.facts.workload)
        known = self._known.get(key)
        if known is None or self.clock() - known[0] > self.seconds:
            known = (self.clock(), may_stop(backend, record.name) is not False)
            self._known[key] = known
        return known[1]


def stop_question(backend: Backend, name: str) -> str | None:
    """None when job ``name`` of ``backend`` may be stopped as any of this tool's jobs; else
    the confirmation to ask (a foreign job the user's RBAC lets them delete).

    Raises :class:`StopRefused` when RBAC does not allow it.
    """
    record = record_of(backend, name)
    if record is None or not is_foreign(record):
        return None
    check_stop(backend, record)
    kind = record.facts.workload or "job"
    who = record.facts.started_by or "someone else"
    return (
        f"{name} is a {kind} started by {who}, not by jupyter-disttrain: stopping it deletes "
        "it for everyone. Confirm to stop it."
    )


def where_refusal(backend: Backend, name: str) -> str | None:
    """Why ``where`` is not available for job ``name`` (its pods do not run this tool's
    runtime: nothing in them answers for stacks), or None when it may be asked."""
    record = record_of(backend, name)
    if record is None or not is_foreign(record):
        return None
    return (
        f"where is not available for {name}: it was not started by jupyter-disttrain, so "
        "its pods do not run its runtime (nothing there sends the ranks' stacks); its "
        "logs and the progress it reports are shown"
    )
