"""The :class:`JobService`: plan, run, attach, list, logs, stop, checkpoints and runtimes."""

from __future__ import annotations

import argparse
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from .. import events as ev
from ..backends import optional
from ..backends.base import (
    Backend,
    BackendError,
    JobNotFound,
    JobRecord,
    Plan,
    RuntimeRecord,
)
from ..backends.registry import backend_class, get_backend, names
from ..checkpoints.jobs import preflight
from ..job import Job
from ..monitor import LOG_LIMIT, Where
from ..options import spec_from_args
from ..payload import Payload, Script, build_payload, build_script_payload
from ..runtime.session import DEFAULT_GRACE
from ..session_list import Sessions
from ..sessions import Session
from ..spec import JobSpec
from ..tracking import check as check_tracking
from ..tracking import sinks_for
from . import namespace
from .following import Followers, attached_job, catch_up, open_monitor, recorded_diagnosis
from .listing import ONE_SHOT, BackendListing, Lister, Listing, ListPolicy, newest_first
from .logtext import BoundedLogs, bounded_logs
from .naming import readable_name
from .recorded import JobView, Recorder, record_view, retire
from .running import RunOutcome, RunView, export_plan, run_and_follow, run_cell_and_follow

Listener = Callable[[ev.Event], None]


class JobService:
    """Every job operation, for one process (a kernel, a command, a server).

    ``launch_mode``, ``linger`` and ``notebook`` configure the backends it creates (one
    per call, see :meth:`backend`). Jobs this process submitted or attached
    to are kept by name (:meth:`registered`). ``listing`` says how backends
    are listed (a kernel or command waits for each; a polled server sets time
    limits and a cache); ``backends`` gives the backends a listing asks when
    none are named (default :meth:`listing_backends`). Raises
    :class:`~jupyter_disttrain.spec.SpecError` for options that cannot run and
    :class:`~jupyter_disttrain.backends.base.BackendError` when a backend refuses.
    """

    def __init__(
        self,
        *,
        launch_mode: str = "fork",
        notebook: str | None = None,
        listing: ListPolicy = ONE_SHOT,
        backends: Callable[[], Sequence[Backend]] | None = None,
    ) -> None:
        self.launch_mode = launch_mode
        self.linger: float | None = None  # the local launcher's; None: its default
        self.notebook = notebook
        self._jobs: dict[str, Job] = {}
        self._recorders: dict[str, Recorder] = {}  # by job name: the record being written
        self._lock = threading.Lock()
        self.sessions = Sessions()
        self._listed_backends = backends
        self._lister = Lister(listing)
        self.followers = Followers()
        self.stop_rights = namespace.StopRights()  # the sidebar's stop buttons ask it

    # ------------------------------------------------------------------ backends

    def backend(self, name: str) -> Backend:
        """A backend called ``name``, with this service's settings.

        A new instance each call: a backend reads its configuration (a
        kubeconfig, the launch mode) when it is made, so a changed
        configuration is picked up by the next job; a job keeps its own.
        """
        found = get_backend(name, launch_mode=self.launch_mode, linger=self.linger)
        found.notebook = self.notebook
        return found

    def configured_backends(self) -> list[Backend]:
        """Backends usable here now (every one that needs no set-up, plus configured ones)."""
        return [self.backend(n) for n in names() if backend_class(n).configured()]

    # ------------------------------------------------------------------ plan and run

    def spec(
        self,
        args: argparse.Namespace,
        defaults: Mapping[str, Any] | None = None,
        *,
        origin: str | None = None,
        cell: int | None = None,
    ) -> JobSpec:
        """A validated spec from parsed options (``defaults`` fill options left unset).

        Without ``--name`` the job is named after ``origin`` (the notebook or
        script path) and ``cell`` (the cell's execution count), see
        :func:`~.naming.readable_name`.
        """
        if not getattr(args, "name", None) and origin is not None:
            args = argparse.Namespace(**{**vars(args), "name": readable_name(origin, cell)})
        spec = spec_from_args(args, dict(defaults or {}))
        check_tracking(spec)
        backend = self.backend(spec.backend)
        backend.check(spec)
        if backend.capabilities.checkpoints_on_path:  # a dry run makes no folder
            spec = preflight(spec, create=not getattr(args, "dry_run", False))
        return spec

    def plan(
        self,
        spec: JobSpec,
        source: str,
        namespace: Mapping[str, Any] | None = None,
        *,
        max_capture_bytes: int | None = None,
        breakpoints: list[dict[str, Any]] | None = None,
    ) -> Plan:
        """The cell (or script) ``source`` with what it uses of ``namespace``, planned.

        Nothing runs; ``str(plan)`` is what ``--dry-run`` prints and
        :meth:`run` submits exactly this plan. ``breakpoints`` (``[{"line",
        "condition"}]`` of the cell's lines) stop every rank there.
        """
        backend = self.backend(spec.backend)
        payload_extra = dict(backend.payload_extra(spec))
        if breakpoints:
            payload_extra["breakpoints"] = breakpoints
        extra: dict[str, Any] = {"extra": payload_extra}
        if max_capture_bytes is not None:
            extra["max_capture_bytes"] = max_capture_bytes
        payload = build_payload(
            source,
            dict(namespace or {}),
            job=spec.name,
            framework=spec.framework,
            dist_backend=spec.dist_backend,
            **extra,
        )
        return backend.plan(spec, payload)

    def plan_script(self, spec: JobSpec, script: Script) -> Plan:
        """A training script (``PATH ARGS`` or ``-m MODULE ARGS``) planned as a cell is.

        Every rank runs it as ``torchrun`` would, with its folder's modules shipped
        (see :func:`~jupyter_disttrain.payload.build_script_payload`).
        """
        backend = self.backend(spec.backend)
        payload = build_script_payload(
            script,
            job=spec.name,
            framework=spec.framework,
            dist_backend=spec.dist_backend,
            extra=backend.payload_extra(spec),
        )
        return backend.plan(spec, payload)

    def export(self, plan: Plan, path: str) -> str:
        """Write the plan's manifests to ``path``; returns what to run next."""
        return export_plan(self.backend(plan.spec.backend), plan, path)

    def run(self, plan: Plan, listeners: Iterable[Listener] = ()) -> Job:
        """Submit ``plan`` and return its :class:`Job` (kept by name).

        The job's metrics also go where its spec says (TensorBoard files, an
        MLflow run; see :mod:`~jupyter_disttrain.tracking`).
        """
        return self._start(Job(plan.spec, self.backend(plan.spec.backend), plan=plan), listeners)

    def _start(self, job: Job, listeners: Iterable[Listener]) -> Job:
        """Attach the listeners and the spec's sinks, submit the job's plan, keep the job."""
        assert job.plan is not None
        for listener in listeners:
            job.add_listener(listener)
        here = job.backend.capabilities.checkpoints_on_path  # a reported path is one of ours
        sinks = sinks_for(job.spec, job.feed, notebook=self.notebook, paths_here=here)
        for sink in sinks:
            job.add_listener(sink.on_event)
            job.add_closer(sink.close)
        retire(self._recorders.pop(job.name, None))  # before this run takes its directory
        try:
            job.submission = job.backend.submit(job.plan, job.sink)
        except BaseException:
            for sink in sinks:
                sink.cancel()
            raise
        self._record(job)
        self._keep(job)
        return job

    def run_and_follow(
        self,
        plan: Plan,
        view: RunView,
        *,
        export: str | None = None,
        dry_run: bool = False,
        wait: bool = True,
        on_start: Callable[[Job], None] | None = None,
    ) -> RunOutcome:
        """The doors' run flow: ``plan`` exported to ``export``, or a dry run, or run and shown.

        See :func:`~.running.run_and_follow`: ``view`` follows the job from
        its submission, ``on_start`` gets the job before the view shows it,
        with ``wait`` the call returns when the job ended, and Ctrl-C stops the job.
        """
        return run_and_follow(
            self, plan, view, export_to=export, dry_run=dry_run, wait=wait, on_start=on_start
        )

    def submit(self, spec: JobSpec, payload: Payload, listeners: Iterable[Listener] = ()) -> Job:
        """Plan and run an already-built payload (the Python API's one call)."""
        return self.run(self.backend(spec.backend).plan(spec, payload), listeners)

    def attach(
        self,
        name: str,
        backend: str | Backend | None = None,
        listeners: Iterable[Listener] = (),
        *,
        log_limit: int = LOG_LIMIT,
        keep: bool = True,
    ) -> Job:
        """Follow an existing job from the start of its event stream.

        ``backend`` None: this process's job of that name, else the first
        configured backend that has it. A kept job's view is recorded for other
        processes as a submitted one's is (:func:`.recorded.record_view`).
        """
        job = attached_job(self._backend_of(name, backend), name, listeners, log_limit=log_limit)
        if keep:
            retire(self._recorders.pop(job.name, None))
            self._record(job)
            self._keep(job)
        return job

    # ------------------------------------------------------------------ this process's jobs

    def _record(self, job: Job) -> None:
        """Record ``job``'s view for other processes (:func:`.recorded.record_view`), if its
        backend records views here; an earlier run's recorder was retired before."""
        if (recorder := record_view(job)) is not None:
            self._recorders[job.name] = recorder

    def registered(self) -> dict[str, Job]:
        """Jobs submitted or attached from this process, by name (oldest first)."""
        with self._lock:
            return dict(self._jobs)

    def _keep(self, job: Job) -> None:
        with self._lock:
            self._jobs.pop(job.name, None)
            self._jobs[job.name] = job

    def stop_all(self, timeout: float = 30.0) -> None:
        """Kernel shutdown: stop every session and running job of this process, its sinks
        finished; those on backends whose jobs survive the kernel
        (``Capabilities.survives_kernel``) are let go instead and run on."""
        self.sessions.stop_all()
        jobs = [j for j in self.registered().values() if j.submission is not None and not j.done]
        for job in [j for j in jobs if j.backend.capabilities.survives_kernel]:
            job.submission.detach()  # type: ignore[union-attr]
        jobs = [j for j in jobs if not j.backend.capabilities.survives_kernel]
        for job in jobs:
            try:
                job.submission.stop("owner shutting down")  # type: ignore[union-attr]
            except Exception:  # a backend gone away must not keep the others running
                continue
        for job in jobs:
            job.submission.join(timeout)  # type: ignore[union-attr]
        for job in jobs:  # and their ends written where they are tracked (TensorBoard, MLflow)
            try:
                job.wait(0)
            except TimeoutError:
                continue

    # ------------------------------------------------------------------ sessions

    def start_session(
        self,
        spec: JobSpec,
        *,
        idle_timeout: float | None = None,
        grace: float = DEFAULT_GRACE,
        listeners: Iterable[Listener] = (),
    ) -> Session:
        """Start a warm worker group for ``spec`` (see :mod:`.sessions`); returns once it is up.

        Raises :class:`~.sessions.SessionError` when the backend cannot run
        sessions, the name is taken by a live session, or the group does not start.
        """
        backend = self.backend(spec.backend)
        session = Session(
            spec, backend, self.run, idle_timeout=idle_timeout, grace=grace, listeners=listeners
        )
        return self.sessions.start(session)

    def run_cell_and_follow(
        self,
        session: Session,
        source: str,
        view: RunView,
        namespace: Mapping[str, Any] | None = None,
        *,
        max_capture_bytes: int | None = None,
        breakpoints: list[dict[str, Any]] | None = None,
    ) -> Any:
        """The doors' flow for a session cell (see :func:`~.running.run_cell_and_follow`):
        ``view`` follows the cell on every rank; returns rank 0's value."""
        return run_cell_and_follow(
            session,
            source,
            view,
            namespace,
            max_capture_bytes=max_capture_bytes,
            breakpoints=breakpoints,
        )

    def session(self, name: str) -> Session:
        """This process's session ``name`` (:class:`~.sessions.SessionError` if none)."""
        return self.sessions.get(name)

    def stop_session(self, name: str) -> str:
        """Stop session ``name``; every process of it ends. Returns the job's final state."""
        return self.sessions.stop(name)

    def restart_session(self, name: str) -> Session:
        """Start session ``name``'s group afresh (every rank's state is lost)."""
        return self.sessions.get(name).restart()

    # ------------------------------------------------------------------ listing

    def list_jobs(
        self,
        backends: Iterable[Backend] | None = None,
        *,
        diagnose: bool = False,
        follow: float | None = None,
    ) -> Listing:
        """Jobs of ``backends`` (default: the service's own, else :meth:`listing_backends`).

        Each backend is asked as the service's :class:`~.listing.ListPolicy`
        says; one that fails to list is reported in ``errors``, the others are
        still listed. With ``diagnose``, each job that is not over gets its
        current diagnosis (this process's jobs from their monitors, others by
        reading their recorded output). With ``follow``, the listed jobs worth
        following are handed to :attr:`followers` and the listing waits up to
        ``follow`` seconds for the ones it handed over.
        """
        listing = Listing(backends=self._listable(backends))
        deadline = time.monotonic() + (follow or 0.0)
        for backend in listing.backends:
            found = self._listing_of(backend)
            if found.error:
                listing.errors[backend.name] = found.error
                continue
            listing.add(backend, found.records)
            if follow is not None:
                for pending in self.followers.enqueue(backend, newest_first(found.records)):
                    left = max(0.0, deadline - time.monotonic())
                    pending.done.wait(left if pending.wait is None else pending.wait)
        listing.records = newest_first(listing.records)
        if diagnose:
            for record in listing.records:
                if record.state not in ev.TERMINAL_STATES or self._mine(record) is not None:
                    listing.diagnoses[(record.backend, record.name)] = self.diagnosis(
                        record, listing.source(record)
                    )
        return listing

    def _listable(self, backends: Iterable[Backend] | None) -> list[Backend]:
        if backends is None:
            made = self._listed_backends
            if made is not None:
                backends = made()
            elif self._lister.policy.configured:
                backends = self.configured_backends()
            else:
                backends = self.listing_backends()
        return self._lister.keep(backends)

    def _listing_of(self, backend: Backend) -> BackendListing:
        """One backend's listing (see :class:`~.listing.Lister`); its stale followers forgotten."""
        found = self._lister.listing(backend)
        if not found.error:
            self.followers.prune(backend, newest_first(found.records))
        return found

    def find(self, backend: str, name: str) -> tuple[Backend, JobRecord]:
        """Listed job ``name`` of backend ``backend`` (of :meth:`list_jobs`' default backends).

        Raises :class:`JobNotFound` for an unknown backend or job and
        :class:`BackendError` when the backend could not list its jobs.
        """
        for found in self._listable(None):
            if found.name == backend:
                break
        else:
            raise JobNotFound(f"no backend named {backend!r} is configured")
        listing = self._listing_of(found)
        if listing.error:
            raise BackendError(f"{found.name}: {listing.error}")
        for record in listing.records:
            if record.name == name:
                return found, record
        raise JobNotFound(f"no {found.name} job named {name!r}")

    def follow(self, backend: Backend, record: JobRecord, wait: float) -> JobView | None:
        """Follow a listed job now if worth it (see :meth:`.Followers.for_detail`); its view.

        A finished job's replay is given up to ``wait`` seconds to complete.
        """
        cached = self._lister.cached(backend.name)
        listed = newest_first(cached.records) if cached is not None else []
        started = self.followers.for_detail(backend, record, listed)
        if started is not None and record.state in ev.TERMINAL_STATES:
            started.join(wait)
        return self.followers.monitor(backend.name, record.name)

    def close(self) -> None:
        """Stop listing threads and the followers' opener (followers end with their jobs)."""
        self._lister.close()
        self.followers.close()

    def listing_backends(self, also: Iterable[str] = ()) -> list[Backend]:
        """Backends worth listing: those that need no set-up, ``also``, and this process's jobs'.

        Backends that need configuration (a cluster) are asked only when named
        in ``also`` or used by a job of this process, so a listing does not
        wait on a cluster nobody uses here.
        """
        wanted = [n for n in names() if not backend_class(n).capabilities.needs_setup]
        wanted += [n for n in also if n in names()]
        out = {n: self.backend(n) for n in wanted}
        for job in self.registered().values():
            out.setdefault(job.backend.name, job.backend)
        return list(out.values())

    def _mine(self, record: JobRecord) -> Job | None:
        job = self.registered().get(record.name)
        return job if job is not None and job.backend.name == record.backend else None

    def diagnosis(self, record: JobRecord, backend: Backend) -> str | None:
        """The current one-sentence reading of a listed job, without any dashboard open."""
        mine = self._mine(record)
        if mine is not None:
            return mine.diagnosis()
        return recorded_diagnosis(backend, record)

    open_monitor = staticmethod(open_monitor)

    # ------------------------------------------------------------------ one job

    def _backend_of(self, name: str, backend: str | Backend | None) -> Backend:
        if isinstance(backend, Backend):
            return backend
        if backend is not None:
            return self.backend(backend)
        mine = self.registered().get(name)
        if mine is not None:
            return mine.backend
        candidates = self.configured_backends()
        for candidate in candidates:
            if any(r.name == name for r in self._lister.listing(candidate).records):
                return candidate
        holder = namespace.holder(candidates, name)  # a job another tool or user started
        return holder or candidates[0]  # the default backend says in its words it has no such job

    def logs(
        self,
        name: str,
        rank: int | None = None,
        tail: int | None = None,
        backend: str | None = None,
    ) -> str:
        """What a job's ranks printed (one rank, or all prefixed with their rank)."""
        return self._backend_of(name, backend).logs(name, rank=rank, tail=tail)

    def bounded_logs(
        self, backend: str | None, name: str, rank: int | None, tail: int | None
    ) -> tuple[Backend, BoundedLogs]:
        """A listed job's (also one another tool started) logs cut to a viewer's size (see
        :func:`~.logtext.bounded_logs`). Raises as :meth:`find` does.
        """
        found, record = self.find_any(backend, name)
        return found, bounded_logs(found, record, rank, tail)

    def where(self, name: str, backend: str | None = None, timeout: float | None = None) -> Where:
        """Where the ranks of job ``name`` are (see :meth:`Job.where`).

        This process's job answers itself; another process's job is followed
        for as long as it takes, then left.
        """
        mine = self.registered().get(name)
        if mine is not None and (backend is None or mine.backend.name == backend):
            return mine.where(timeout)
        refusal = namespace.where_refusal(self._backend_of(name, backend), name)
        if refusal is not None:
            raise BackendError(refusal)
        job = self.attach(name, backend, log_limit=200, keep=False)
        submission = job.submission
        try:
            if submission is not None:
                catch_up(job.monitor, submission, job.status())
            return job.where(timeout)
        finally:
            if submission is not None:
                submission.detach()

    def stop(self, name: str, backend: str | None = None) -> str:
        """Stop a job of any owner; returns what happened, for display."""
        mine = self.registered().get(name)
        if mine is not None and backend in (None, mine.backend.name):
            return mine.stop()
        stopped = self.stop_listed(self._backend_of(name, backend), name)
        return "stopped" if stopped else "was not running"

    def list_all(self, backends: Iterable[Backend] | None = None) -> Listing:
        """Every job of the backends' scopes, whoever started it (:mod:`.namespace`)."""
        return namespace.list_namespace(self._listable(backends))

    def find_any(self, backend: str | None, name: str) -> tuple[Backend, JobRecord]:
        """:meth:`find`, else job ``name`` among every job of the backend's scope (a job
        another tool or user started), the backend a listed or a configured one (a cluster
        this process has no job on); ``backend`` None: the first of them that has the job.
        Raises as :meth:`find`."""
        if backend is None:
            return namespace.first_found([b.name for b in self._scopes()], name, self.find_any)
        try:
            return self.find(backend, name)
        except JobNotFound:
            for found in self._scopes():
                record = namespace.record_of(found, name) if found.name == backend else None
                if record is not None:
                    return found, record
            raise

    def _scopes(self) -> list[Backend]:
        """The backends listed by default, then the configured ones not among them."""
        listed = self._listable(None)
        known = {b.name for b in listed}
        return listed + [b for b in self.configured_backends() if b.name not in known]

    def stop_question(self, name: str, backend: str | None = None) -> str | None:
        """The confirmation stopping job ``name`` needs (a foreign job), or None; raises
        :class:`~.namespace.StopRefused` when RBAC forbids it."""
        mine = self.registered().get(name)  # attached to here: maybe someone else's
        if mine is not None and backend in (None, mine.backend.name):
            return namespace.stop_question(mine.backend, name)
        return namespace.stop_question(self._backend_of(name, backend), name)

    def stop_listed(self, backend: Backend, name: str) -> bool:
        """Ask ``backend`` to stop job ``name`` of any owner; False when it was not running.

        The backend's cached listing is dropped, so the next one shows the change.
        """
        try:
            return backend.stop(name)
        finally:
            self._lister.forget(backend.name)

    def runtimes(self) -> list[RuntimeRecord]:
        """Training runtimes of every configured backend that has them."""
        out: list[RuntimeRecord] = []
        for backend in self.configured_backends():
            if optional.RUNTIMES.has(backend):
                out.extend(optional.RUNTIMES.of(backend).runtimes())
        return out

    def checkpoint_dir(self, job: Job) -> str:
        """Where ``job`` writes checkpoints (see :func:`..checkpoints.jobs.checkpoint_uri`)."""
        from ..checkpoints.jobs import checkpoint_uri

        return checkpoint_uri(job)
