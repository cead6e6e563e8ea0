"""JobManager: every job of every configured backend, for the lab extension (no web code).

Backends are the local one (job directories) and, when a kubeconfig or an
in-cluster service account exists, the Kubernetes one (jobs this tool made in
the current context's namespace). Each listing asks every backend with a
time limit; a backend that fails or does not answer in time becomes an error
entry of :class:`~.views.BackendStatus` and the others are still listed.

Progress, ranks and metrics come from a :class:`~jupyter_disttrain.monitor.JobMonitor`
fed by the backend's own ``attach`` (for local jobs a
:class:`~jupyter_disttrain.backends.local.LocalReplay`: the job's
``events.jsonl`` and rank logs replayed, then followed while the job runs).
Local jobs are followed as soon as they are listed (reading files is cheap);
Kubernetes jobs only once their detail is asked for while they run (following
costs watches on the API server). Thread-safe: handlers call it from a pool.

Listed jobs are opened one at a time by one background thread (a finished
job's replay reads all its logs), newest first; a listing waits at most
:data:`REPLAY_WAIT` for them and shows the rest from their records until
their replay is done. A detail request opens its own job at once. So the
first listing of many finished jobs neither takes long nor holds up a detail
request. One job whose view cannot be built is listed with an ``error`` and
does not fail the others.
"""

from __future__ import annotations

import concurrent.futures as cf
import math
import queue
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ..backends.base import Backend, BackendError, JobNotFound, JobRecord, Submission
from ..events import TERMINAL_STATES
from ..monitor import JobMonitor
from ..service import JobService
from .checkpoint_list import list_checkpoints
from .views import (
    BackendStatus,
    JobJSON,
    JobListJSON,
    LogsJSON,
    StopJSON,
    job_json,
    record_json,
)

#: Seconds a backend may take to list its jobs before it is reported as not answering.
LIST_TIMEOUT = 5.0
#: Reuse a listing of a backend that needs configuration (a cluster) for this long: spare
#: its API server a list per poll. Other backends (reading local files) are listed each time.
CLUSTER_CACHE_SECONDS = 3.0
#: Local jobs followed at once (the newest); older ones show without progress.
MAX_FOLLOWED = 64
#: Largest ``tail`` a log request may ask for (``all`` means this many), over all ranks shown.
MAX_TAIL = 5000
#: Most characters of log text one answer carries (its end is kept).
MAX_LOG_CHARS = 2 * 1024 * 1024
#: Seconds a listing (or a detail request) waits for the replays of the jobs it follows.
REPLAY_WAIT = 1.0
#: Seconds the background opener gives one finished job's replay before opening the next.
REPLAY_TURN = 10.0
#: Log lines a followed job keeps in memory (the log viewer reads the files).
FOLLOW_LOG_LINES = 200


def configured_backends() -> list[Backend]:
    """The backends a user has configured right now."""
    return JobService().configured_backends()


@dataclass
class _Listing:
    records: list[JobRecord]
    error: str
    at: float


@dataclass
class _Followed:
    """A followed job; ``monitor`` None: being opened, or its events cannot be read."""

    created: float
    monitor: JobMonitor | None
    submission: Submission | None


@dataclass
class _Pending:
    """A job waiting for the background opener; ``done`` is set once it was opened."""

    backend: Backend
    record: JobRecord
    done: threading.Event = field(default_factory=threading.Event)


class JobManager:
    """Lists, follows, stops and reads the logs of jobs of several backends.

    ``backends`` is called at each listing (default :func:`configured_backends`,
    so a kubeconfig created later is picked up); instances are kept by name.
    ``root_dir`` is the server's root, to turn recorded notebook paths into
    openable ones. Raises :class:`JobNotFound` for an unknown backend or job and
    :class:`BackendError` when a backend refuses an action.
    """

    def __init__(
        self,
        backends: Callable[[], Sequence[Backend]] = configured_backends,
        *,
        root_dir: str | None = None,
        list_timeout: float = LIST_TIMEOUT,
        cache_seconds: dict[str, float] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._backend_factory = backends
        self.root_dir = root_dir
        self.list_timeout = list_timeout
        self.cache_seconds = cache_seconds
        self.clock = clock
        self._lock = threading.RLock()
        self._backends: dict[str, Backend] = {}
        self._listings: dict[str, _Listing] = {}
        self._inflight: dict[str, cf.Future[list[JobRecord]]] = {}
        self._followed: dict[tuple[str, str], _Followed] = {}
        self._pool = cf.ThreadPoolExecutor(4, thread_name_prefix="distrain-list")
        self._queue: queue.SimpleQueue[_Pending | None] = queue.SimpleQueue()
        self._queued: dict[tuple[str, str], _Pending] = {}
        self._opener: threading.Thread | None = None

    # ------------------------------------------------------------------ queries

    def list_jobs(self) -> JobListJSON:
        """Every job of every backend, newest first, with the backends' status."""
        statuses: list[BackendStatus] = []
        records: list[tuple[Backend, JobRecord]] = []
        deadline = time.monotonic() + REPLAY_WAIT
        for backend in self._current_backends():
            listing = self._listing(backend)
            for pending in self._enqueue(backend, listing):  # the newest come first
                pending.done.wait(max(0.0, deadline - time.monotonic()))
            statuses.append(BackendStatus(name=backend.name, ok=not listing.error,
                                          error=listing.error))  # fmt: skip
            records.extend((backend, r) for r in listing.records)
        records.sort(key=lambda br: -_when(br[1].created))
        now = self.clock()
        jobs = [self._safe_json(backend, record, now, detail=False) for backend, record in records]
        running = sum(1 for j in jobs if j["state"] not in TERMINAL_STATES)
        return JobListJSON(jobs=jobs, backends=statuses, running=running, now=now)

    def job(self, backend: str, name: str) -> JobJSON:
        """One job with its ranks, metrics and checkpoints (starts following it if it runs)."""
        found, record = self._find(backend, name)
        key = (found.name, record.name)
        with self._lock:
            followed = self._followed.get(key)
            if found.capabilities.has_pods:
                follow = record.state not in TERMINAL_STATES
            else:  # the newest local jobs, at once rather than in the opener's turn
                newest = self._listings[found.name].records[:MAX_FOLLOWED]
                follow = any(r.name == record.name for r in newest)
        started = followed.submission if followed is not None else None
        if followed is None and follow:
            started = self._follow(found, record)
        if started is not None and record.state in TERMINAL_STATES:
            started.join(REPLAY_WAIT)  # a finished job's detail shows it complete
        return self._safe_json(found, record, self.clock(), detail=True)

    def logs(self, backend: str, name: str, rank: int | None, tail: int | None) -> LogsJSON:
        """The last ``tail`` lines of ``rank`` (every rank, prefixed, when None).

        ``tail`` None (``all``) means :data:`MAX_TAIL`; for every rank at once
        the lines are shared among the ranks; at most :data:`MAX_LOG_CHARS`
        characters are sent. ``message`` says when the answer was cut.
        """
        asked = tail
        found, record = self._find(backend, name)
        ranks = list(range(record.world_size))
        budget = MAX_TAIL if rank is not None else max(1, MAX_TAIL // max(1, len(ranks)))
        tail = budget if tail is None else max(0, min(tail, budget))
        text, message = "", ""
        try:
            text = found.logs(name, rank=rank, tail=tail)
        except JobNotFound as exc:  # e.g. a rank that has printed nothing yet
            message = str(exc)
        if len(text) > MAX_LOG_CHARS:
            text = text[-MAX_LOG_CHARS:].partition("\n")[2]
            message = f"showing the last {MAX_LOG_CHARS // (1024 * 1024)} MiB of output"
        elif text and (asked is None or asked > tail):
            message = f"at most the last {tail} lines{' per rank' if rank is None else ''} shown"
        if not text and not message:
            message = "no output yet"
        return LogsJSON(id=f"{found.name}/{name}", rank=rank, tail=tail, ranks=ranks, text=text,
                        message=message)  # fmt: skip

    def stop(self, backend: str, name: str) -> StopJSON:
        """Stop a job of any owner; ``stopped`` is False when it was not running."""
        found, _ = self._find(backend, name)
        stopped = found.stop(name)
        with self._lock:
            self._listings.pop(found.name, None)
        _, record = self._find(backend, name)
        job = self._safe_json(found, record, self.clock(), detail=False)
        return StopJSON(stopped=stopped, job=job)

    def close(self) -> None:
        """Stop listing threads and the opener (followers end with their jobs)."""
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._queue.put(None)

    # ------------------------------------------------------------------ internals

    def _current_backends(self) -> list[Backend]:
        with self._lock:
            out = []
            for backend in self._backend_factory():
                out.append(self._backends.setdefault(backend.name, backend))
            return out

    def _backend(self, name: str) -> Backend:
        for backend in self._current_backends():
            if backend.name == name:
                return backend
        raise JobNotFound(f"no backend named {name!r} is configured")

    def _find(self, backend: str, name: str) -> tuple[Backend, JobRecord]:
        found = self._backend(backend)
        listing = self._listing(found)
        if listing.error:
            raise BackendError(f"{found.name}: {listing.error}")
        for record in listing.records:
            if record.name == name:
                return found, record
        raise JobNotFound(f"no {found.name} job named {name!r}")

    def _listing(self, backend: Backend) -> _Listing:
        now = time.monotonic()
        with self._lock:
            cached = self._listings.get(backend.name)
            if self.cache_seconds is None:
                ttl = CLUSTER_CACHE_SECONDS if backend.capabilities.needs_configuration else 0.0
            else:
                ttl = self.cache_seconds.get(backend.name, 0.0)
            if cached is not None and not cached.error and now - cached.at < ttl:
                return cached
            future = self._inflight.get(backend.name)
            if future is None or future.done():
                future = self._pool.submit(backend.list_jobs)
                self._inflight[backend.name] = future
        try:
            listing = _Listing(future.result(timeout=self.list_timeout), "", now)
        except cf.TimeoutError:
            listing = _Listing([], f"no answer within {self.list_timeout:g} s", now)
        except Exception as exc:  # any failure of one backend stays its own
            listing = _Listing([], str(exc) or type(exc).__name__, now)
        with self._lock:
            self._listings[backend.name] = listing
            if not listing.error:
                self._prune(backend, listing.records)
        return listing

    def _enqueue(self, backend: Backend, listing: _Listing) -> list[_Pending]:
        """Hand the listed jobs to follow, not followed yet, to the background opener.

        Returns the ones queued by this call (a later listing does not wait for them again).
        """
        if listing.error or backend.capabilities.has_pods:  # pods: followed on request only
            return []
        out = []
        with self._lock:
            for record in listing.records[:MAX_FOLLOWED]:  # following reads files: cheap
                key = (backend.name, record.name)
                if key in self._followed:
                    continue
                if key not in self._queued:
                    pending = self._queued[key] = _Pending(backend, record)
                    self._queue.put(pending)
                    out.append(pending)
            if out and (self._opener is None or not self._opener.is_alive()):
                self._opener = threading.Thread(
                    target=self._open_queued, name="distrain-open", daemon=True
                )
                self._opener.start()
        return out

    def _open_queued(self) -> None:
        """The opener: follow queued jobs one by one; a finished one's replay runs alone."""
        while (pending := self._queue.get()) is not None:
            try:
                replay = self._follow(pending.backend, pending.record)
                if replay is not None and pending.record.state in TERMINAL_STATES:
                    replay.join(REPLAY_TURN)
            except Exception:  # shown from its record; tried again at a later listing
                pass
            finally:
                with self._lock:
                    self._queued.pop((pending.backend.name, pending.record.name), None)
                pending.done.set()

    def _prune(self, backend: Backend, records: list[JobRecord]) -> None:
        """Forget followers of jobs gone or re-created, and local jobs past the newest."""
        current = {r.name: r for r in records}
        for key in [k for k in self._followed if k[0] == backend.name]:
            record = current.get(key[1])
            if record is None or record.created != self._followed[key].created:
                self._forget(key)
        if not backend.capabilities.has_pods:
            keep = {r.name for r in records[:MAX_FOLLOWED]}
            for key in [k for k in self._followed if k[0] == backend.name and k[1] not in keep]:
                self._forget(key)

    def _forget(self, key: tuple[str, str]) -> None:
        followed = self._followed.pop(key)
        if followed.submission is not None:
            followed.submission.detach()

    def _follow(self, backend: Backend, record: JobRecord) -> Submission | None:
        """Start following ``record``; its replay when this call started one, else None.

        The job is claimed under the lock, then opened without it.
        """
        key = (backend.name, record.name)
        claim = _Followed(record.created, None, None)
        with self._lock:
            if key in self._followed:
                return None
            self._followed[key] = claim
        try:
            monitor, submission = JobService.open_monitor(
                backend, record, log_limit=FOLLOW_LOG_LINES
            )
        except Exception:  # a job directory that cannot be read: shown from its record
            monitor, submission = None, None
        with self._lock:
            mine = self._followed.get(key) is claim
            if mine and monitor is not None and submission is not None:
                self._followed[key] = _Followed(record.created, monitor, submission)
                return submission
            if mine:  # tried again at the next listing
                del self._followed[key]
        if submission is not None:  # forgotten meanwhile (the job was re-created)
            submission.detach()
        return None

    def _safe_json(
        self, backend: Backend, record: JobRecord, now: float, *, detail: bool
    ) -> JobJSON:
        """:meth:`_json`, or the job from its record alone with the reason its view failed."""
        try:
            return self._json(backend, record, now, detail=detail)
        except Exception as exc:  # one bad job never fails the listing of the others
            message = f"cannot show this job's progress: {type(exc).__name__}: {exc}"
            return record_json(record, now=now, error=message)

    def _json(self, backend: Backend, record: JobRecord, now: float, *, detail: bool) -> JobJSON:
        with self._lock:
            followed = self._followed.get((backend.name, record.name))
        monitor = followed.monitor if followed is not None else None
        snapshot = monitor.snapshot(now) if monitor is not None else None
        return job_json(
            record, snapshot, now=now, detail=detail, root_dir=self.root_dir,
            checkpoints=lambda reported: list_checkpoints(record, backend, reported),
        )  # fmt: skip


def _when(created: object) -> float:
    """A record's creation time to sort by (0 for one that is not a finite number)."""
    if isinstance(created, int | float) and math.isfinite(created):
        return float(created)
    return 0.0
