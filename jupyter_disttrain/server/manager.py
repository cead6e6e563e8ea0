"""JobManager: the lab extension's view of every job, over the one job service (no web code).

Backends are the configured ones (:meth:`JobService.configured_backends`: the
local one, and the Kubernetes one when a kubeconfig or an in-cluster service
account exists). Listing, its time limits and cache, following jobs without
a dashboard, logs and stop are the :class:`~jupyter_disttrain.service.JobService`'s
(with the :data:`~jupyter_disttrain.service.listing.POLLED` policy); this
module turns their answers into the JSON of :mod:`.views`, where
:func:`~.views.job_json` builds every job the frontend sees. A backend that
fails or does not answer in time is an error entry of
:class:`~.views.BackendStatus`; one job whose view cannot be built is listed
with an ``error`` and does not fail the others. Thread-safe: handlers call it
from a pool.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import replace

from ..backends import optional
from ..backends.base import Backend, JobRecord
from ..events import TERMINAL_STATES
from ..service import JobService, namespace
from ..service.listing import LIST_TIMEOUT, POLLED
from ..service.logtext import MAX_LOG_CHARS, MAX_TAIL
from .checkpoint_list import list_checkpoints
from .views import (
    BackendStatus,
    JobJSON,
    JobListJSON,
    LogsJSON,
    NamespaceJSON,
    StopJSON,
    job_json,
    namespace_job_json,
    record_json,
)

__all__ = ["MAX_LOG_CHARS", "MAX_TAIL", "REPLAY_WAIT", "JobManager"]

#: Seconds a listing (or a detail request) waits for the replays of the jobs it follows.
REPLAY_WAIT = 1.0


class JobManager:
    """Lists, follows, stops and reads the logs of jobs of several backends, as JSON.

    ``backends`` is called at each listing (default: the service's
    :meth:`~JobService.configured_backends`, so a kubeconfig created later is
    picked up); instances are kept by name.
    ``root_dir`` is the server's root, to turn recorded notebook paths into
    openable ones. ``list_timeout`` and ``cache_seconds`` adjust the service's
    listing policy (see :class:`~jupyter_disttrain.service.ListPolicy`).
    Raises :class:`JobNotFound` for an unknown backend or job and
    :class:`BackendError` when a backend refuses an action.
    """

    def __init__(
        self,
        backends: Callable[[], Sequence[Backend]] | None = None,
        *,
        root_dir: str | None = None,
        list_timeout: float = LIST_TIMEOUT,
        cache_seconds: dict[str, float] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.root_dir = root_dir
        self.clock = clock
        policy = replace(POLLED, timeout=list_timeout, cache_seconds=cache_seconds)
        self.service = JobService(listing=policy, backends=backends)
        self._namespace_watches: dict[str, Callable[[], None] | None] = {}

    def list_jobs(self) -> JobListJSON:
        """Every job of every backend, newest first, with the backends' status."""
        listing = self.service.list_jobs(follow=REPLAY_WAIT)
        errors = listing.errors
        statuses = [
            BackendStatus(name=b.name, ok=b.name not in errors, error=errors.get(b.name, ""))
            for b in listing.backends
        ]
        now = self.clock()
        jobs = [self._safe_json(listing.source(r), r, now, detail=False) for r in listing.records]
        running = sum(1 for j in jobs if j["state"] not in TERMINAL_STATES)
        return JobListJSON(jobs=jobs, backends=statuses, running=running, now=now)

    def namespace(self) -> NamespaceJSON:
        """Every job of the configured backends' scopes, whoever started it (the sidebar's
        namespace section). After the first call each backend follows its scope with a few
        long-lived watches (:class:`~..backends.optional.ListsNamespace`): a call then asks
        nothing."""
        listing = self.service.list_all()
        for backend in listing.backends:
            if backend.name not in self._namespace_watches:
                self._namespace_watches[backend.name] = (
                    optional.NAMESPACE.of(backend).watch_namespace()
                    if optional.NAMESPACE.has(backend)
                    else None
                )
        statuses = [
            BackendStatus(
                name=b.name, ok=b.name not in listing.errors, error=listing.errors.get(b.name, "")
            )
            for b in listing.backends
        ]
        rows = [
            namespace_job_json(r, may_stop=self.service.stop_rights.allows(listing.source(r), r))
            for r in listing.records
        ]
        return NamespaceJSON(jobs=rows, backends=statuses, now=self.clock())

    def job(self, backend: str, name: str) -> JobJSON:
        """One job with its ranks, metrics and checkpoints (starts following it if it runs);
        a job of the namespace another tool started too."""
        found, record = self.service.find_any(backend, name)
        self.service.follow(found, record, REPLAY_WAIT)
        return self._safe_json(found, record, self.clock(), detail=True)

    def logs(self, backend: str, name: str, rank: int | None, tail: int | None) -> LogsJSON:
        """The last ``tail`` lines of ``rank`` (every rank, prefixed, when None).

        See :meth:`JobService.bounded_logs`: ``tail`` None (``all``) means
        :data:`MAX_TAIL` shared among the ranks; at most :data:`MAX_LOG_CHARS`
        characters are sent; ``message`` says when the answer was cut.
        """
        found, logs = self.service.bounded_logs(backend, name, rank, tail)
        return LogsJSON(
            id=f"{found.name}/{name}",
            rank=rank,
            tail=logs.tail,
            ranks=logs.ranks,
            text=logs.text,
            message=logs.message,
        )

    def stop(self, backend: str, name: str) -> StopJSON:
        """Stop a job of any owner; ``stopped`` is False when it was not running."""
        found, record = self.service.find_any(backend, name)
        namespace.check_stop(found, record)  # StopRefused: read-only for this user
        stopped = self.service.stop_listed(found, name)
        _, record = self.service.find_any(backend, name)
        job = self._safe_json(found, record, self.clock(), detail=False)
        return StopJSON(stopped=stopped, job=job)

    def close(self) -> None:
        """Stop listing threads, namespace watches and the opener (followers end with their
        jobs)."""
        for stop in self._namespace_watches.values():
            if stop is not None:
                stop()
        self._namespace_watches.clear()
        self.service.close()

    def _safe_json(
        self, backend: Backend, record: JobRecord, now: float, *, detail: bool
    ) -> JobJSON:
        """The job's JSON, or the job from its record alone with the reason its view failed."""
        try:
            monitor = self.service.followers.monitor(backend.name, record.name)
            snapshot = monitor.snapshot(now) if monitor is not None else None
            return job_json(
                record,
                snapshot,
                now=now,
                detail=detail,
                root_dir=self.root_dir,
                checkpoints=lambda reported: list_checkpoints(record, backend, reported),
            )
        except Exception as exc:  # one bad job never fails the listing of the others
            message = f"cannot show this job's progress: {type(exc).__name__}: {exc}"
            return record_json(record, now=now, error=message)
