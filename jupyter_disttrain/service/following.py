"""Listed jobs followed by monitors, without any dashboard open (the sidebar's progress).

A :class:`~jupyter_disttrain.monitor.JobMonitor` is fed by the backend's own
``attach`` (for local jobs the job's ``events.jsonl`` and rank logs replayed,
then followed while the job runs). Jobs of backends with local workers are followed
as soon as they are listed (reading files is cheap), the newest
:data:`MAX_FOLLOWED`; jobs of remote workers only once their detail is asked for while
they run (following costs watches on the API server), and once when they failed (the
newest :data:`MAX_FAILED_READ`: their logs name the failing rank, which the
orchestrator's message does not).

Listed jobs are opened one at a time by one background thread (a finished
job's replay reads all its logs), newest first; a detail request opens its
own job at once. A follower of a job gone, re-created or past the newest is
forgotten at the next listing. Thread-safe.

A job whose follower records its view (:mod:`.recorded`: a local job's kernel or
``disttrain run``) is shown from that record, not followed again: its lines are
parsed and verified once, by the process that follows it. A job without a
believable record is followed here; once that replay reaches the job's end, this
process writes the record for the next reader.

:func:`attached_job` is the other way to follow an existing job: a whole
:class:`~jupyter_disttrain.job.Job` over the backend's attach (``JobService.attach``).
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from ..backends import optional
from ..backends.base import Backend, BackendError, EventFeed, EventSink, JobRecord, Submission
from ..events import TERMINAL_STATES, Event
from ..job import Job
from ..monitor import LOG_LIMIT, JobMonitor
from .recorded import JobView, RecordedView, record_at_end, view_path, view_place

#: Jobs of local workers followed at once (the newest); older ones show without progress.
MAX_FOLLOWED = 64
#: Failed jobs of remote workers read once for their cause (the newest), so that the first
#: listing showing one failed names the rank's error, not only the orchestrator's message.
MAX_FAILED_READ = 8
#: Seconds a listing waits for such a read (reading a remote job's logs takes requests).
FAILED_READ_WAIT = 8.0
#: Seconds the background opener gives one finished job's replay before opening the next.
REPLAY_TURN = 10.0
#: Log lines a followed job keeps in memory (logs are read from the backend).
FOLLOW_LOG_LINES = 200
#: Seconds to wait for a finished job's recorded events when attaching to read it.
REPLAY_WAIT = 2.0
#: Seconds a running job's recorded output may take to be read for a listing's diagnosis.
CATCH_UP = 2.0


def open_monitor(
    backend: Backend, record: JobRecord, *, log_limit: int = 200, record_end: bool = False
) -> tuple[JobMonitor | None, Submission | None]:
    """A monitor fed by the backend's attach for ``record``, and the follower's handle.

    With ``record_end``, the job's view is recorded once the replay reached its end
    (see :func:`.recorded.record_at_end`; backends that keep job directories here).
    """
    monitor = JobMonitor(
        record.name,
        backend.name,
        max(1, record.world_size),
        nodes=max(1, record.nodes),
        nproc=max(1, record.nproc),
        log_limit=log_limit,
        phases=backend.capabilities.phases,
        max_restarts=record.max_restarts,
    )
    sink: EventSink = EventFeed(monitor.feed_many)
    place = view_place(backend, record.name) if record_end else None
    if place is not None:
        sink = record_at_end(monitor, *place)
    try:
        _, submission = optional.ATTACH.of(backend).attach(record.name, sink)
    except BackendError:
        return None, None
    return monitor, submission


def attached_job(
    backend: Backend,
    name: str,
    listeners: Iterable[Callable[[Event], None]] = (),
    *,
    log_limit: int = LOG_LIMIT,
) -> Job:
    """A :class:`Job` over ``backend``'s attach to job ``name``, its ``listeners`` added;
    they and the job see every event, also those that arrived before the job existed."""
    holder: list[Job] = []
    pending: list[Event] = []
    lock = threading.Lock()

    def many(events: Sequence[Event]) -> None:
        with lock:
            if not holder:
                pending.extend(events)
                return
        holder[0].feed_many(events)

    spec, submission = optional.ATTACH.of(backend).attach(name, EventFeed(many))
    job = Job(spec, backend, log_limit=log_limit)
    for listener in listeners:
        job.add_listener(listener)
    job.submission = submission
    with lock:
        job.feed_many(pending)
        holder.append(job)
    return job


def catch_up(monitor: JobMonitor, submission: Submission, state: str) -> None:
    """Wait until the recorded events of a job in ``state`` are read (the replay ended, or
    output stopped growing)."""
    if state in TERMINAL_STATES:
        submission.join(REPLAY_WAIT)
        return
    deadline = time.monotonic() + CATCH_UP
    seen = -1
    while time.monotonic() < deadline and monitor.version != seen:
        seen = monitor.version
        time.sleep(0.2)


def recorded_diagnosis(backend: Backend, record: JobRecord) -> str | None:
    """The current one-sentence reading of a listed job, from what it recorded so far."""
    view = RecordedView.open(backend, record.name)
    if view is not None and view.current(record.state):
        return view.snapshot()["diagnosis"]
    monitor, submission = open_monitor(backend, record)
    if monitor is None or submission is None:
        return None
    try:
        catch_up(monitor, submission, record.state)
        return monitor.diagnosis()
    finally:
        submission.detach()  # read what is there; following it on is not this call's job


@dataclass
class _Followed:
    """A followed job; ``monitor`` None: being opened, or its events cannot be read.

    ``monitor`` is the job's record when its follower writes one (``submission`` None).
    """

    created: float
    monitor: JobView | None
    submission: Submission | None
    #: The modification time of the job's record when last looked at (see _take_record).
    record_seen: int | None = None


@dataclass
class Pending:
    """A job waiting for the background opener; ``done`` is set once it was opened."""

    backend: Backend
    record: JobRecord
    done: threading.Event = field(default_factory=threading.Event)
    #: Seconds a listing may wait for it (None: the listing's own ``follow`` time).
    wait: float | None = None


class Followers:
    """The followed jobs of one process, by ``(backend name, job name)``."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._followed: dict[tuple[str, str], _Followed] = {}
        self._queue: queue.SimpleQueue[Pending | None] = queue.SimpleQueue()
        self._queued: dict[tuple[str, str], Pending] = {}
        self._opener: threading.Thread | None = None
        #: Failed remote jobs already read (name, created): read once, whatever came of it.
        self._read_failed: set[tuple[str, str, float]] = set()

    def monitor(self, backend: str, name: str) -> JobView | None:
        """What shows job ``name`` of ``backend``: its record or the monitor following it
        (None: not followed, or not yet)."""
        with self._lock:
            followed = self._followed.get((backend, name))
        return followed.monitor if followed is not None else None

    def enqueue(self, backend: Backend, records: list[JobRecord]) -> list[Pending]:
        """Hand the listed jobs worth following, not followed yet, to the background opener.

        Local workers' jobs: the newest :data:`MAX_FOLLOWED` (following reads files:
        cheap). Remote workers' jobs are followed on request while they run, and a
        failed one among the newest is read once for its cause (:data:`MAX_FAILED_READ`;
        its :attr:`Pending.wait` is :data:`FAILED_READ_WAIT`). ``records`` newest first.
        Returns the ones queued by this call (a later listing does not wait for them again).
        """
        remote = backend.capabilities.remote_workers
        newest = records[:MAX_FOLLOWED]
        wanted = [r for r in newest if r.state == "Failed"][:MAX_FAILED_READ] if remote else newest
        out = []
        with self._lock:
            for record in wanted:
                key = (backend.name, record.name)
                once = (backend.name, record.name, record.created)
                if key in self._followed or (remote and once in self._read_failed):
                    continue
                if key not in self._queued:
                    pending = Pending(backend, record, wait=FAILED_READ_WAIT if remote else None)
                    self._queued[key] = pending
                    if remote:
                        self._read_failed.add(once)
                    self._queue.put(pending)
                    out.append(pending)
            if out and (self._opener is None or not self._opener.is_alive()):
                self._opener = threading.Thread(
                    target=self._open_queued, name="distrain-open", daemon=True
                )
                self._opener.start()
        return out

    def for_detail(
        self, backend: Backend, record: JobRecord, listed: list[JobRecord]
    ) -> Submission | None:
        """Follow ``record`` now if it is worth it; the follower's handle (None: not followed).

        Worth it: a job of remote workers while it runs; another job among the newest of
        ``listed`` (at once, rather than in the opener's turn).
        """
        key = (backend.name, record.name)
        with self._lock:
            followed = self._followed.get(key)
        if followed is not None:
            self._take_record(backend, record, followed)
            return self._submission(key)
        if backend.capabilities.remote_workers:
            follow = record.state not in TERMINAL_STATES
        else:
            follow = any(r.name == record.name for r in listed[:MAX_FOLLOWED])
        return self.follow(backend, record) if follow else None

    def _submission(self, key: tuple[str, str]) -> Submission | None:
        """The handle of the follower here of job ``key`` (None: none, or shown recorded)."""
        with self._lock:
            followed = self._followed.get(key)
        return None if followed is None else followed.submission

    def _take_record(self, backend: Backend, record: JobRecord, followed: _Followed) -> None:
        """Show a job followed here from its follower's record instead, once a current one
        appeared (the kernel that submitted it started recording after this process began
        following it). Looked at again only when the record's file changed."""
        if followed.submission is None:
            return
        path = view_path(backend, record.name)
        try:
            seen = None if path is None else path.stat().st_mtime_ns
        except OSError:
            seen = None
        if seen is None or seen == followed.record_seen:
            return
        followed.record_seen = seen
        view = RecordedView.open(backend, record.name)
        if view is None or not view.current(record.state):
            return
        key = (backend.name, record.name)
        with self._lock:
            if self._followed.get(key) is not followed:
                return
            self._followed[key] = _Followed(record.created, view, None)
        followed.submission.detach()

    def prune(self, backend: Backend, records: list[JobRecord]) -> None:
        """Forget followers of jobs gone or re-created, and of local-worker jobs past the newest;
        show a job from its follower's record once one appeared.

        ``records``: the backend's whole listing, newest first.
        """
        current = {r.name: r for r in records}
        with self._lock:
            followed_here = [
                (current[k[1]], f)
                for k, f in self._followed.items()
                if k[0] == backend.name and k[1] in current
            ]
        for listed, followed in followed_here:
            self._take_record(backend, listed, followed)
        with self._lock:
            for key in [k for k in self._followed if k[0] == backend.name]:
                record = current.get(key[1])
                if record is None or record.created != self._followed[key].created:
                    self._forget(key)
                elif not _current(self._followed[key].monitor, record.state):
                    self._forget(key)  # its follower died before recording the end
            if not backend.capabilities.remote_workers:
                keep = {r.name for r in records[:MAX_FOLLOWED]}
                for key in [k for k in self._followed if k[0] == backend.name and k[1] not in keep]:
                    self._forget(key)

    def follow(self, backend: Backend, record: JobRecord) -> Submission | None:
        """Start following ``record``; its replay when this call started one, else None.

        The job is claimed under the lock, then opened without it.
        """
        key = (backend.name, record.name)
        claim = _Followed(record.created, None, None)
        with self._lock:
            if key in self._followed:
                return None
            self._followed[key] = claim
        monitor: JobView | None = None
        submission: Submission | None = None
        try:
            view = RecordedView.open(backend, record.name)
            if view is not None and view.current(record.state):
                monitor = view  # recorded by the job's follower: nothing to follow here
            else:
                monitor, submission = open_monitor(
                    backend, record, log_limit=FOLLOW_LOG_LINES, record_end=True
                )
        except Exception:  # a job directory that cannot be read: shown from its record
            monitor, submission = None, None
        with self._lock:
            mine = self._followed.get(key) is claim
            if mine and isinstance(monitor, RecordedView):
                self._followed[key] = _Followed(record.created, monitor, None)
                return None
            if mine and monitor is not None and submission is not None:
                self._followed[key] = _Followed(record.created, monitor, submission)
                return submission
            if mine:  # tried again at the next listing
                del self._followed[key]
        if submission is not None:  # forgotten meanwhile (the job was re-created)
            submission.detach()
        return None

    def close(self) -> None:
        """End the background opener (followers end with their jobs)."""
        self._queue.put(None)

    def _forget(self, key: tuple[str, str]) -> None:
        followed = self._followed.pop(key)
        if followed.submission is not None:
            followed.submission.detach()

    def _open_queued(self) -> None:
        """The opener: follow queued jobs one by one; a finished one's replay runs alone."""
        while (pending := self._queue.get()) is not None:
            try:
                replay = self.follow(pending.backend, pending.record)
                if replay is not None and pending.record.state in TERMINAL_STATES:
                    replay.join(REPLAY_TURN)
            except Exception:  # shown from its record; tried again at a later listing
                pass
            finally:
                with self._lock:
                    self._queued.pop((pending.backend.name, pending.record.name), None)
                pending.done.set()


def _current(view: JobView | None, state: str) -> bool:
    """False for a record of a job listed as ended that it shows as running."""
    return not isinstance(view, RecordedView) or view.current(state)
