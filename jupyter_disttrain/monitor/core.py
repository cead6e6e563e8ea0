"""JobMonitor: the state of one job, built from its event stream, shared between threads.

Pure (no I/O, no threads of its own) and thread-safe: a reader thread calls
:meth:`JobMonitor.feed` while the kernel thread reads; one lock guards all
state and every reader returns copies or immutable values. The monitor is
the single owner of a job's state, result, errors and diagnosis: a
:class:`~jupyter_disttrain.job.Job` is a handle over it, and widgets, the
text view, the sidebar and the command line only render what it keeps.

Three parts, one responsibility each: a :class:`~.state.JobBook` keeps the
facts and applies each event to the part that owns it; :mod:`.readings`
derives what the facts read as (the diagnosis, the hang, the snapshot); the
monitor holds the lock, wakes the waiters and answers each question with a
copy.

Times are the ``t`` of the events (Unix seconds); methods that need the
current time take ``now`` (default: :func:`time.time`).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import replace
from typing import Any, Unpack

import numpy as np
from numpy.typing import NDArray

from ..events import TERMINAL_STATES, Event, JobState
from ..logbuffer import Divergence, FoldedLine, LogLine, Search
from ..nccl import NcclSummary
from . import readings
from .cause import Cause
from .paused import PausedRank
from .records import (
    BookSettings,
    Checkpoint,
    ErrorInfo,
    Failure,
    RankState,
    Series,
    SlowRow,
    Snapshot,
    now_or_clock,
)
from .state import JobBook
from .where import Where


class JobMonitor:
    """State of one job: job state, per-rank rows, metrics, checkpoints, logs.

    Job state: ``job`` events set it explicitly, and an explicit terminal
    state (Succeeded/Failed/Stopped) stays until another ``job`` event. Until
    then it is derived: Running at the first ``hello`` (and again at a
    ``hello`` after a ``restart``), Restarting at a ``restart``, Failed when
    a rank reports ``error`` or exits non-zero, Succeeded when every rank
    reported ``done``.

    Stragglers are Running ranks whose last step is behind the median last
    step of the Running ranks by more than
    ``max(straggler_steps, straggler_fraction * median)`` (defaults 10 steps
    and 20%).

    ``settings`` (constructor): see :class:`~.state.BookSettings`; ``phases``, the
    start-up phases the backend observes, each get a row of the snapshot's timeline.
    """

    def __init__(
        self,
        name: str,
        backend: str,
        world_size: int,
        nodes: int = 1,
        nproc: int = 1,
        **settings: Unpack[BookSettings],
    ) -> None:
        self._lock = threading.RLock()
        self._changed = threading.Condition(self._lock)
        self._book = JobBook(name, backend, world_size, nodes, nproc, lock=self._lock, **settings)

    # ------------------------------------------------------------------ feeding

    def feed(self, event: Event) -> None:
        """Apply one event (any kind; unknown kinds only count as activity)."""
        with self._lock:
            self._book.apply(event)
            self._changed.notify_all()

    def feed_many(self, events: Iterable[Event]) -> None:
        """Apply events in order under one lock acquisition."""
        with self._lock:
            self._book.apply_many(events)
            self._changed.notify_all()

    # ------------------------------------------------------------------ what the job is

    @property
    def name(self) -> str:
        """The job's name."""
        return self._book.name

    @property
    def backend(self) -> str:
        """The backend that runs the job (its registered name)."""
        return self._book.backend

    @property
    def nodes(self) -> int:
        """Nodes the job was started with."""
        return self._book.nodes

    @property
    def nproc(self) -> int:
        """Processes per node the job was started with."""
        return self._book.nproc

    @property
    def phases(self) -> tuple[str, ...]:
        """The start-up phases the backend observes (the snapshot's timeline rows)."""
        return self._book.phases

    # ------------------------------------------------------------------ job-level readers

    @property
    def state(self) -> JobState:
        """The job state (one of :data:`~jupyter_disttrain.events.JOB_STATES`)."""
        with self._lock:
            return self._book.state

    @property
    def reported_state(self) -> JobState:
        """The state the backend last reported (``job`` events only); final once terminal."""
        with self._lock:
            return self._book.reported

    @property
    def display_state(self) -> str:
        """The state to show: the job state, ``Hung`` while a detected hang lasts, ``Paused``
        in the debugger, ``Raised`` for a session cell that raised (see :mod:`.raised`)."""
        with self._lock:
            return readings.display_state(self._book)

    @property
    def reason(self) -> str:
        """Why the job is in its state, the one line every view shows (see :meth:`cause`).

        Failed: the root cause and its consequences; Restarting: the cause it
        restarts after; otherwise what the backend said (why it waits, how it ended).
        """
        with self._lock:
            return readings.why(self._book)

    def cause(self) -> Cause | None:
        """The root cause of the current attempt's failures (see :mod:`.cause`), or None."""
        with self._lock:
            return self._book.cause()

    def recovered(self) -> list[Cause]:
        """The causes of the earlier attempts a restart recovered from, oldest first."""
        with self._lock:
            return self._book.faults.recovered()

    def cause_error(self) -> Event | None:
        """The ``error`` event of the cause's rank (its first of the attempt), or None."""
        with self._lock:
            cause = self._book.cause()
            if cause is None:
                return None
            return self._book.faults.error_event(cause.rank, cause.attempt)

    @property
    def ended(self) -> bool:
        """True once the backend reported a terminal state."""
        with self._lock:
            return self._book.reported in TERMINAL_STATES

    def wait(self, timeout: float | None = None) -> JobState:
        """Block until the backend reports a terminal state; return it.

        Raises :class:`TimeoutError` naming the job and its state after ``timeout`` s.
        """
        with self._changed:
            if not self._changed.wait_for(
                lambda: self._book.reported in TERMINAL_STATES, timeout=timeout
            ):
                raise TimeoutError(
                    f"job {self.name} still {self._book.reported} after {timeout:g} s"
                )
            return self._book.reported

    def comms(self) -> NcclSummary:
        """The NCCL / c10d / gloo reading of every log line received so far."""
        with self._lock:
            return self._book.comms.summary()

    def diagnosis(self) -> str | None:
        """The job's current one-sentence reading (communication, hang or failure), or None.

        A communication failure wins; a hang is read while the job runs and no
        rank wrote anything since its stacks were taken.
        """
        with self._lock:
            return readings.diagnosis(self._book)

    def paused(self) -> list[PausedRank]:
        """The ranks stopped in the debugger now, in rank order."""
        with self._lock:
            return self._book.pauses.ranks(self._book.rows)

    def where(self, request: str | None = None) -> Where | None:
        """The stacks of ``request`` (default: the newest), grouped; None if none arrived."""
        with self._lock:
            if request is None:
                request = self._book.stacks.newest()
            if request is None or self._book.stacks.of(request) is None:
                return None
            return readings.where(self._book, request)

    def wait_for_stacks(self, request: str, timeout: float) -> Where | None:
        """Wait until every rank that is still up sent its stacks for ``request``.

        Returns what arrived by then (None when nothing did).
        """

        with self._changed:
            self._changed.wait_for(
                lambda: self._book.stacks.complete(request, readings.up(self._book)),
                timeout=timeout,
            )
            if self._book.stacks.of(request) is None:
                return None
            return readings.where(self._book, request)

    def hang(self) -> Where | None:
        """The newest hang's stacks while no rank wrote anything since; else None."""
        with self._lock:
            return readings.hang_where(self._book)

    def slow(self, now: float | None = None) -> list[SlowRow]:
        """Running ranks whose own step time is far above the median (see :mod:`.scale`).

        A rank's step time is its ``step_time`` metric (seconds of its own work
        per step) where the ranks report one, else the interval between its
        steps; a stalled rank has none.
        """
        with self._lock:
            return readings.slow_rows(self._book, now)

    @property
    def world_size(self) -> int:
        """Number of ranks (the workers' ``hello`` overrides the constructor)."""
        with self._lock:
            return self._book.world_size

    @property
    def dist_backend(self) -> str | None:
        """The process-group backend the workers reported (``gloo``, ``nccl``)."""
        with self._lock:
            return self._book.dist_backend

    @property
    def restarts(self) -> int:
        """Job-wide restarts so far."""
        with self._lock:
            return self._book.attempt

    @property
    def version(self) -> int:
        """Events applied so far; changes whenever anything may have changed."""
        with self._lock:
            return self._book.version

    @property
    def log_limit(self) -> int:
        """Log lines kept per rank; older lines are dropped (and counted)."""
        return self._book.logs.limit

    def elapsed(self, now: float | None = None) -> float:
        """Seconds from the first event to the terminal event, or to ``now``."""
        with self._lock:
            return readings.elapsed(self._book, now)

    def steps_per_second(self) -> float | None:
        """Overall rate: (highest step - first step) / time between those metrics.

        Restart downtime counts as time; ``None`` before two distinct steps half a second
        apart (:data:`~.pace.MIN_RATE_SPAN_S`).
        """
        with self._lock:
            return self._book.pace.overall()

    @property
    def rate_window(self) -> float:
        """Seconds of recent metrics a rank's steps/s is measured over."""
        return self._book.pace.rate_window

    def ranks(self) -> list[RankState]:
        """Copies of the rank rows, by rank."""
        with self._lock:
            return [
                replace(row, versions=dict(row.versions))
                for _, row in sorted(self._book.rows.items())
            ]

    def rank(self, rank: int) -> RankState | None:
        """A copy of one rank's row."""
        with self._lock:
            row = self._book.rows.get(rank)
            return None if row is None else replace(row, versions=dict(row.versions))

    def failures(self) -> list[Failure]:
        """Every rank failure so far, in arrival order (all attempts)."""
        with self._lock:
            return self._book.faults.failures()

    def first_failure(self) -> tuple[int, str] | None:
        """``(rank, reason)`` of the earliest failure (by event time) since the last restart."""
        with self._lock:
            found = readings.first_failure(self._book)
            return None if found is None else (found.rank, found.reason)

    def stragglers(self) -> list[int]:
        """Running ranks far behind the median step (see the class docstring)."""
        with self._lock:
            return readings.stragglers(self._book)

    def silent_ranks(self, after: float, now: float | None = None) -> list[int]:
        """Running ranks not heard from for more than ``after`` seconds."""
        with self._lock:
            at = now_or_clock(now)
            return [
                r
                for r, row in sorted(self._book.rows.items())
                if row.state == "Running" and (row.silent_for(at) or 0.0) > after
            ]

    def checkpoints(self) -> list[Checkpoint]:
        """Reported checkpoints in arrival order."""
        with self._lock:
            return list(self._book.checkpoints)

    def result(self) -> Event | None:
        """The ``result`` event (rank 0's if it sent one), a copy."""
        with self._lock:
            res = self._book.result
            return None if res is None else Event(res.kind, res.rank, res.t, dict(res.fields))

    def error_events(self) -> list[Event]:
        """Every ``error`` event (all fields, for re-raising), oldest first; copies."""
        with self._lock:
            return self._book.faults.error_events()

    def errors(self) -> list[ErrorInfo]:
        """Every ``error`` event in arrival order."""
        with self._lock:
            return self._book.faults.errors()

    # ------------------------------------------------------------------ metrics

    def metric_names(self) -> list[str]:
        """Metric names in order of first appearance."""
        return self._book.metrics.names()

    def metric_ranks(self, name: str) -> list[int]:
        """Ranks that reported ``name``, sorted."""
        return self._book.metrics.ranks(name)

    def latest_values_of(self, name: str) -> dict[int, float]:
        """Per rank that reported ``name``, its last value."""
        return self._book.metrics.latest_of(name)

    def series_length(self, name: str, rank: int) -> int:
        """Number of points of ``name`` from ``rank`` (the next index for :meth:`points_since`)."""
        return self._book.metrics.length(name, rank)

    def series(self, name: str, rank: int, *, by_step: bool = False) -> Series:
        """All points of ``name`` from ``rank`` in arrival order (empty if none).

        After a restart steps may repeat; ``by_step=True`` returns one point
        per step (the latest), sorted by step.
        """
        return self._book.metrics.series(name, rank, by_step=by_step)

    def points_since(self, name: str, rank: int, index: int) -> Series:
        """Points from position ``index`` on, for incremental plotting.

        Series only grow, so a consumer keeps ``index += len(result.steps)``.
        """
        return self._book.metrics.since(name, rank, index)

    def mean_series(self, name: str) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """``(steps, means)``: per step, the mean over the ranks that reported it.

        Each rank contributes its latest value for a step; a NaN value makes
        that step's mean NaN.
        """
        return self._book.metrics.mean(name)

    def metrics_table(self) -> list[dict[str, float | int]]:
        """One row per metric event: ``rank``, ``step``, ``t`` and each reported value."""
        return self._book.metrics.table()

    def metrics_columns(self) -> dict[str, NDArray[Any]]:
        """:meth:`metrics_table` as columns (NaN where an event lacks a metric)."""
        return self._book.metrics.columns_and_presence()[0]

    # ------------------------------------------------------------------ logs

    def log_lines(
        self,
        ranks: Iterable[int] | None = None,
        search: Search = None,
        limit: int | None = None,
        since: int | None = None,
    ) -> list[LogLine]:
        """Kept log lines (see :meth:`LogBuffer.lines`); job-wide lines have rank -1."""
        with self._lock:
            return self._book.logs.lines(ranks, search, limit, since)

    def folded_logs(
        self,
        ranks: Iterable[int] | None = None,
        search: Search = None,
        limit: int | None = None,
    ) -> list[FoldedLine]:
        """Kept log lines with lines repeated across ranks folded (:meth:`LogBuffer.folded`)."""
        with self._lock:
            return self._book.logs.folded(ranks, search, limit)

    def log_divergence(self, ranks: Iterable[int] | None = None) -> Divergence | None:
        """Where the ranks' output first differs (:meth:`LogBuffer.first_divergence`)."""
        with self._lock:
            return self._book.logs.first_divergence(ranks)

    # ------------------------------------------------------------------ snapshot

    def snapshot(self, now: float | None = None) -> Snapshot:
        """A JSON-able summary of everything shown (see :class:`Snapshot`)."""
        with self._lock:
            return readings.snapshot(self._book, now)
