"""JobMonitor: the state of one job, built from its event stream.

Pure (no I/O, no threads of its own) and thread-safe: a reader thread calls
:meth:`JobMonitor.feed` while the kernel thread reads; one lock guards all
state and every reader returns copies or immutable values. The monitor is
the single owner of a job's state, result, errors and diagnosis: a
:class:`~jupyter_disttrain.job.Job` is a handle over it, and widgets, the
text view, the sidebar and the command line only render what it keeps.

Times are the ``t`` of the events (Unix seconds); methods that need the
current time take ``now`` (default: :func:`time.time`).
"""

from __future__ import annotations

import statistics
import threading
from collections import deque
from collections.abc import Iterable
from dataclasses import replace
from typing import Any, Final

import numpy as np
from numpy.typing import NDArray

from ..events import JOB_STATES, TERMINAL_STATES, Event, JobState
from ..logbuffer import JOB_RANK, Divergence, FoldedLine, LogBuffer, LogLine, Search
from ..nccl import NcclParser, NcclSummary
from .metrics import MetricStore
from .records import (
    RANK_STATES,
    Checkpoint,
    CheckpointRow,
    ErrorInfo,
    ErrorRow,
    Failure,
    FailureRow,
    JSONFloat,
    LogSummary,
    RankRow,
    RankState,
    Series,
    Snapshot,
    _finite_or_none,
    _int,
    _now,
    _str,
)

# --------------------------------------------------------------------------- the monitor


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
    """

    def __init__(
        self,
        name: str,
        backend: str,
        world_size: int,
        nodes: int = 1,
        nproc: int = 1,
        *,
        log_limit: int = 2000,
        straggler_steps: int = 10,
        straggler_fraction: float = 0.2,
        rate_window: float = 30.0,
    ) -> None:
        if world_size < 1 or nodes < 1 or nproc < 1:
            raise ValueError("world_size, nodes and nproc must be positive")
        self.name = name
        self.backend = backend
        self.nodes = nodes
        self.nproc = nproc
        self.straggler_steps = straggler_steps
        self.straggler_fraction = straggler_fraction
        self.rate_window = rate_window
        self._lock = threading.RLock()
        self._world_size = world_size
        self._rows: dict[int, RankState] = {}
        for rank in range(world_size):
            self._row(rank)
        self._state: JobState = "Pending"
        self._explicit_terminal = False
        self._reason = ""
        self._message = ""
        self._dist_backend: str | None = None
        self._attempt = 0
        self._first_t: float | None = None
        self._started_t: float | None = None
        self._end_t: float | None = None
        self._version = 0
        # per rank: attempt of the last hello, recent (t, step) points
        self._hello_attempt: dict[int, int] = {}
        self._restart_counted: set[int] = set()
        self._recent: dict[int, deque[tuple[float, int]]] = {}
        self._failures: list[Failure] = []
        self._errors: list[ErrorInfo] = []
        self._error_events: list[Event] = []
        self._checkpoints: list[Checkpoint] = []
        self._result: Event | None = None
        self._logs = LogBuffer(log_limit)
        self._metrics = MetricStore(self._lock)
        # what the backend itself last said (the end is final only once it says so)
        self._reported: JobState = "Pending"
        self._changed = threading.Condition(self._lock)
        # every log line goes through the NCCL / c10d / gloo parser as it arrives
        self._comms = NcclParser()
        self._comms_lines = 0
        self._comms_summary: tuple[int, NcclSummary] | None = None
        self._first_metric: tuple[float, int] | None = None
        self._frontier: tuple[float, int] | None = None

    # ------------------------------------------------------------------ feeding

    def feed(self, event: Event) -> None:
        """Apply one event (any kind; unknown kinds only count as activity)."""
        with self._lock:
            self._apply(event)
            self._changed.notify_all()

    def feed_many(self, events: Iterable[Event]) -> None:
        """Apply events in order under one lock acquisition."""
        with self._lock:
            for event in events:
                self._apply(event)
            self._changed.notify_all()

    def _apply(self, ev: Event) -> None:
        self._version += 1
        if self._first_t is None:
            self._first_t = ev.t
        rank = ev.rank
        row = self._row(rank) if rank is not None and rank >= 0 else None
        if row is not None and ev.kind in _WORKER_SPEAKS:
            row.last_heard = ev.t if row.last_heard is None else max(row.last_heard, ev.t)
        handler = _HANDLERS.get(ev.kind)
        if handler is not None:
            handler(self, ev, row)

    def _on_job(self, ev: Event, row: RankState | None) -> None:
        self._reason = _str(ev.get("reason"))
        self._message = _str(ev.get("message"))
        state = ev.get("state")
        if state not in JOB_STATES:
            return
        self._reported = state
        self._explicit_terminal = False
        self._set_state(state, ev.t)
        self._explicit_terminal = state in TERMINAL_STATES
        if state in ("Stopped", "Failed"):
            for other in self._rows.values():
                if other.state in ("Pending", "Running", "Restarting"):
                    other.state = "Stopped"

    def _on_restart(self, ev: Event, row: RankState | None) -> None:
        attempt = _int(ev.get("attempt"))
        self._attempt = max(self._attempt + 1, attempt or 0)
        reason = _str(ev.get("reason"))
        if not self._explicit_terminal:
            self._reason = reason
            self._message = ""
        self._derive("Restarting", ev.t)
        for other in self._rows.values():
            other.restarts += 1
            other.state = "Restarting"
            other.step = other.step_rate = None  # the new processes report afresh
        self._recent.clear()
        self._restart_counted.clear()

    def _on_hello(self, ev: Event, row: RankState | None) -> None:
        if row is None:
            return
        if self._hello_attempt.get(row.rank) == self._attempt:
            # A second hello in the same attempt: this rank was restarted on its own.
            if row.rank not in self._restart_counted:
                row.restarts += 1
            row.step = row.step_rate = None
        self._restart_counted.discard(row.rank)
        self._hello_attempt[row.rank] = self._attempt
        local_rank = _int(ev.get("local_rank"))
        node = _int(ev.get("node_rank"))
        pid = _int(ev.get("pid"))
        if local_rank is not None:
            row.local_rank = local_rank
        if node is not None:
            row.node = node
        if pid is not None:
            row.pid = pid
        row.host = _str(ev.get("host")) or row.host
        versions = ev.get("versions")
        if isinstance(versions, dict):
            row.versions = dict(versions)
        backend = ev.get("backend")
        if isinstance(backend, str) and backend:
            self._dist_backend = backend
        world = _int(ev.get("world_size"))
        if world is not None and world > 0 and world != self._world_size:
            self._resize(world)
        self._recent.pop(row.rank, None)
        if self._explicit_terminal:
            return  # the backend said the job is over; keep its verdict on the rows
        row.state = "Running"
        row.exit_code = None
        row.reason = ""
        # A late hello from a healthy rank does not hide another rank's failure.
        if self._state != "Failed" or all(r.state != "Failed" for r in self._rows.values()):
            self._derive("Running", ev.t)

    def _on_metric(self, ev: Event, row: RankState | None) -> None:
        step = _int(ev.get("step"))
        values = ev.get("values")
        if row is None or step is None:
            return
        if row.state == "Pending":
            row.state = "Running"
            if self._state == "Pending":
                self._derive("Running", ev.t)
        self._track_step(row, step, ev.t)
        self._metrics.add(row.rank, step, ev.t, values)

    def _track_step(self, row: RankState, step: int, t: float) -> None:
        recent = self._recent.get(row.rank)
        if recent is None or (recent and step < recent[-1][1]):
            recent = self._recent[row.rank] = deque(maxlen=1024)
        recent.append((t, step))
        while len(recent) > 2 and t - recent[1][0] >= self.rate_window:
            recent.popleft()
        t0, s0 = recent[0]
        row.step_rate = (step - s0) / (t - t0) if t > t0 and step >= s0 else None
        row.step = step
        if self._first_metric is None:
            self._first_metric = (t, step)
        if self._frontier is None or step > self._frontier[1]:
            self._frontier = (t, step)

    def _on_checkpoint(self, ev: Event, row: RankState | None) -> None:
        step = _int(ev.get("step"))
        self._checkpoints.append(
            Checkpoint(
                step if step is not None else -1,
                _str(ev.get("uri")),
                _int(ev.get("bytes")),
                ev.rank,
                ev.t,
            )
        )

    def _on_result(self, ev: Event, row: RankState | None) -> None:
        if self._result is None or ev.rank == 0 or self._result.rank != 0:
            self._result = Event(ev.kind, ev.rank, ev.t, dict(ev.fields))

    def _on_error(self, ev: Event, row: RankState | None) -> None:
        info = ErrorInfo(
            ev.rank,
            ev.t,
            _str(ev.get("type")) or "Error",
            _str(ev.get("message")),
            _str(ev.get("traceback")),
        )
        self._errors.append(info)
        self._error_events.append(Event(ev.kind, ev.rank, ev.t, dict(ev.fields)))
        if row is None:
            return
        reason = f"{info.type}: {info.message}" if info.message else info.type
        if self._explicit_terminal and row.state == "Stopped":
            return
        row.state = "Failed"
        row.reason = reason
        self._fail(row, ev.t, reason)

    def _on_done(self, ev: Event, row: RankState | None) -> None:
        if row is None:
            return
        row.state = "Succeeded"
        world = range(self._world_size)
        if all(r in self._rows and self._rows[r].state == "Succeeded" for r in world):
            self._derive("Succeeded", ev.t)

    def _on_rank(self, ev: Event, row: RankState | None) -> None:
        if row is None:
            return
        state = _str(ev.get("state"))
        code = _int(ev.get("exit_code"))
        reason = _str(ev.get("reason"))
        node = _int(ev.get("node"))
        if node is not None:
            row.node = node
        row.host = _str(ev.get("host")) or row.host
        row.pod = _str(ev.get("pod")) or row.pod
        if code is not None:
            row.exit_code = code
        if self._explicit_terminal and row.state == "Stopped":
            return  # teardown of a job that is already over: not a failure
        if state == "Failed" or (code is not None and code != 0):
            why = reason or "failed"
            if code is not None:
                why = f"{reason} (exit code {code})" if reason else f"exit code {code}"
            if row.state != "Failed" or not row.reason:
                row.reason = why
            row.state = "Failed"
            self._fail(row, ev.t, why)
            return
        if state not in RANK_STATES:
            row.reason = reason or state
            return
        if state == "Exited" and row.state == "Succeeded":
            return
        if state == "Restarting" and row.state != "Restarting":
            row.restarts += 1
            self._restart_counted.add(row.rank)
        row.state = state
        row.reason = reason
        if state == "Running":
            row.exit_code = None

    # ------------------------------------------------------------------ state helpers

    def _row(self, rank: int) -> RankState:
        row = self._rows.get(rank)
        if row is None:
            row = self._rows[rank] = RankState(rank, rank // self.nproc, rank % self.nproc)
        return row

    def _resize(self, world: int) -> None:
        self._world_size = world
        for rank in range(world):
            self._row(rank)
        for rank in [r for r, row in self._rows.items() if r >= world]:
            row = self._rows[rank]
            if row.state == "Pending" and row.last_heard is None:
                del self._rows[rank]

    def _fail(self, row: RankState, t: float, reason: str) -> None:
        self._failures.append(Failure(t, row.rank, reason, self._attempt))
        self._derive("Failed", t)

    def _derive(self, state: JobState, t: float) -> None:
        """A state inferred from worker facts; ignored once the backend said terminal."""
        if not self._explicit_terminal and state != self._state:
            self._set_state(state, t)

    def _set_state(self, state: JobState, t: float) -> None:
        self._state = state
        if state in TERMINAL_STATES:
            self._end_t = t
        else:
            self._end_t = None
        if state == "Running" and self._started_t is None:
            self._started_t = t

    # ------------------------------------------------------------------ job-level readers

    @property
    def state(self) -> JobState:
        """The job state (one of :data:`~jupyter_disttrain.events.JOB_STATES`)."""
        with self._lock:
            return self._state

    @property
    def reported_state(self) -> JobState:
        """The state the backend last reported (``job`` events only); final once terminal."""
        with self._lock:
            return self._reported

    @property
    def reason(self) -> str:
        """Why the job is in its reported state (empty while it runs normally)."""
        with self._lock:
            return self._message or self._reason

    @property
    def ended(self) -> bool:
        """True once the backend reported a terminal state."""
        with self._lock:
            return self._reported in TERMINAL_STATES

    def wait(self, timeout: float | None = None) -> JobState:
        """Block until the backend reports a terminal state; return it.

        Raises :class:`TimeoutError` naming the job and its state after ``timeout`` s.
        """
        with self._changed:
            if not self._changed.wait_for(
                lambda: self._reported in TERMINAL_STATES, timeout=timeout
            ):
                raise TimeoutError(f"job {self.name} still {self._reported} after {timeout:g} s")
            return self._reported

    def comms(self) -> NcclSummary:
        """The NCCL / c10d / gloo reading of every log line received so far."""
        with self._lock:
            cached = self._comms_summary
            if cached is None or cached[0] != self._comms_lines:
                cached = self._comms_summary = (self._comms_lines, self._comms.summary())
            return cached[1]

    def diagnosis(self) -> str | None:
        """The job's current one-sentence reading (communication or failure), or None."""
        with self._lock:
            return self._diagnosis()

    def _diagnosis(self) -> str | None:
        comms = self.comms()
        if comms.failure != "none" and comms.diagnosis:
            return comms.diagnosis
        failure = self._first_failure()
        if self._state == "Failed" and failure is not None:
            return f"rank {failure.rank} failed: {failure.reason}"
        if self._state == "Failed" and (self._message or self._reason):
            return f"the job failed: {self._message or self._reason}"
        return None

    @property
    def world_size(self) -> int:
        """Number of ranks (the workers' ``hello`` overrides the constructor)."""
        with self._lock:
            return self._world_size

    @property
    def dist_backend(self) -> str | None:
        """The process-group backend the workers reported (``gloo``, ``nccl``)."""
        with self._lock:
            return self._dist_backend

    @property
    def restarts(self) -> int:
        """Job-wide restarts so far."""
        with self._lock:
            return self._attempt

    @property
    def version(self) -> int:
        """Events applied so far; changes whenever anything may have changed."""
        with self._lock:
            return self._version

    @property
    def log_limit(self) -> int:
        """Log lines kept per rank; older lines are dropped (and counted)."""
        return self._logs.limit

    def elapsed(self, now: float | None = None) -> float:
        """Seconds from the first event to the terminal event, or to ``now``."""
        with self._lock:
            if self._first_t is None:
                return 0.0
            end = self._end_t if self._end_t is not None else _now(now)
            return max(0.0, end - self._first_t)

    def steps_per_second(self) -> float | None:
        """Overall rate: (highest step - first step) / time between those metrics.

        Restart downtime counts as time; ``None`` before two distinct steps.
        """
        with self._lock:
            if self._first_metric is None or self._frontier is None:
                return None
            (t0, s0), (t1, s1) = self._first_metric, self._frontier
            return (s1 - s0) / (t1 - t0) if t1 > t0 and s1 > s0 else None

    def ranks(self) -> list[RankState]:
        """Copies of the rank rows, by rank."""
        with self._lock:
            return [
                replace(row, versions=dict(row.versions)) for _, row in sorted(self._rows.items())
            ]

    def rank(self, rank: int) -> RankState | None:
        """A copy of one rank's row."""
        with self._lock:
            row = self._rows.get(rank)
            return None if row is None else replace(row, versions=dict(row.versions))

    def failures(self) -> list[Failure]:
        """Every rank failure so far, in arrival order (all attempts)."""
        with self._lock:
            return list(self._failures)

    def first_failure(self) -> tuple[int, str] | None:
        """``(rank, reason)`` of the earliest failure (by event time) since the last restart."""
        with self._lock:
            found = self._first_failure()
            return None if found is None else (found.rank, found.reason)

    def _first_failure(self) -> Failure | None:
        current = [f for f in self._failures if f.attempt == self._attempt]
        return min(current, key=lambda f: f.t) if current else None

    def stragglers(self) -> list[int]:
        """Running ranks far behind the median step (see the class docstring)."""
        with self._lock:
            return self._stragglers()

    def _stragglers(self) -> list[int]:
        steps = {
            r: row.step
            for r, row in self._rows.items()
            if row.state == "Running" and row.step is not None
        }
        if len(steps) < 2:
            return []
        median = statistics.median(steps.values())
        allowed = max(self.straggler_steps, self.straggler_fraction * median)
        return sorted(r for r, step in steps.items() if median - step > allowed)

    def silent_ranks(self, after: float, now: float | None = None) -> list[int]:
        """Running ranks not heard from for more than ``after`` seconds."""
        with self._lock:
            at = _now(now)
            return [
                r
                for r, row in sorted(self._rows.items())
                if row.state == "Running" and (row.silent_for(at) or 0.0) > after
            ]

    def checkpoints(self) -> list[Checkpoint]:
        """Reported checkpoints in arrival order."""
        with self._lock:
            return list(self._checkpoints)

    def result(self) -> Event | None:
        """The ``result`` event (rank 0's if it sent one), a copy."""
        with self._lock:
            res = self._result
            return None if res is None else Event(res.kind, res.rank, res.t, dict(res.fields))

    def error_events(self) -> list[Event]:
        """Every ``error`` event (all fields, for re-raising), oldest first; copies."""
        with self._lock:
            found = sorted(self._error_events, key=lambda e: e.t)
            return [Event(e.kind, e.rank, e.t, dict(e.fields)) for e in found]

    def errors(self) -> list[ErrorInfo]:
        """Every ``error`` event in arrival order."""
        with self._lock:
            return list(self._errors)

    # ------------------------------------------------------------------ metrics

    def metric_names(self) -> list[str]:
        """Metric names in order of first appearance."""
        return self._metrics.names()

    def metric_ranks(self, name: str) -> list[int]:
        """Ranks that reported ``name``, sorted."""
        return self._metrics.ranks(name)

    def series_length(self, name: str, rank: int) -> int:
        """Number of points of ``name`` from ``rank`` (the next index for :meth:`points_since`)."""
        return self._metrics.length(name, rank)

    def series(self, name: str, rank: int, *, by_step: bool = False) -> Series:
        """All points of ``name`` from ``rank`` in arrival order (empty if none).

        After a restart steps may repeat; ``by_step=True`` returns one point
        per step (the latest), sorted by step.
        """
        return self._metrics.series(name, rank, by_step=by_step)

    def points_since(self, name: str, rank: int, index: int) -> Series:
        """Points from position ``index`` on, for incremental plotting.

        Series only grow, so a consumer keeps ``index += len(result.steps)``.
        """
        return self._metrics.since(name, rank, index)

    def mean_series(self, name: str) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """``(steps, means)``: per step, the mean over the ranks that reported it.

        Each rank contributes its latest value for a step; a NaN value makes
        that step's mean NaN.
        """
        return self._metrics.mean(name)

    def metrics_table(self) -> list[dict[str, float | int]]:
        """One row per metric event: ``rank``, ``step``, ``t`` and each reported value."""
        return self._metrics.table()

    def metrics_columns(self) -> dict[str, NDArray[Any]]:
        """:meth:`metrics_table` as columns (NaN where an event lacks a metric)."""
        return self._metrics.columns_and_presence()[0]

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
            return self._logs.lines(ranks, search, limit, since)

    def folded_logs(
        self,
        ranks: Iterable[int] | None = None,
        search: Search = None,
        limit: int | None = None,
    ) -> list[FoldedLine]:
        """Kept log lines with lines repeated across ranks folded (:meth:`LogBuffer.folded`)."""
        with self._lock:
            return self._logs.folded(ranks, search, limit)

    def log_divergence(self, ranks: Iterable[int] | None = None) -> Divergence | None:
        """Where the ranks' output first differs (:meth:`LogBuffer.first_divergence`)."""
        with self._lock:
            return self._logs.first_divergence(ranks)

    def _on_log(self, ev: Event, row: RankState | None) -> None:
        rank = ev.rank if ev.rank is not None and ev.rank >= 0 else JOB_RANK
        text = _str(ev.get("text"))
        self._logs.append(rank, ev.t, text)
        self._comms.feed(text, rank if rank >= 0 else None)
        self._comms_lines += 1

    # ------------------------------------------------------------------ snapshot

    def snapshot(self, now: float | None = None) -> Snapshot:
        """A JSON-able summary of everything shown (see :class:`Snapshot`)."""
        with self._lock:
            at = _now(now)
            latest = self._metrics.latest_values()
            failure = self._first_failure()
            frontier = None if self._frontier is None else self._frontier[1]
            return Snapshot(
                name=self.name,
                backend=self.backend,
                dist_backend=self._dist_backend,
                state=self._state,
                reason=self._reason,
                message=self._message,
                world_size=self._world_size,
                nodes=self.nodes,
                nproc=self.nproc,
                restarts=self._attempt,
                created=self._first_t,
                started=self._started_t,
                ended=self._end_t,
                now=at,
                elapsed=self.elapsed(at),
                step=frontier,
                steps_per_s=_finite_or_none(self.steps_per_second()),
                ranks=[self._rank_row(row, at, latest) for _, row in sorted(self._rows.items())],
                first_failure=None
                if failure is None
                else FailureRow(rank=failure.rank, t=failure.t, reason=failure.reason),
                stragglers=self._stragglers(),
                metrics=self._metrics.rows(),
                checkpoints=[
                    CheckpointRow(step=c.step, uri=c.uri, bytes=c.bytes, rank=c.rank, t=c.t)
                    for c in self._checkpoints
                ],
                errors=[
                    ErrorRow(
                        rank=e.rank, t=e.t, type=e.type, message=e.message, traceback=e.traceback
                    )
                    for e in self._errors
                ],
                has_result=self._result is not None,
                logs=LogSummary(
                    kept=len(self._logs), total=self._logs.total, dropped=self._logs.dropped
                ),
                version=self._version,
                diagnosis=self._diagnosis(),
            )

    def _rank_row(
        self, row: RankState, now: float, latest: dict[int, dict[str, JSONFloat]]
    ) -> RankRow:
        return RankRow(
            rank=row.rank,
            node=row.node,
            local_rank=row.local_rank,
            host=row.host,
            pod=row.pod,
            pid=row.pid,
            state=row.state,
            restarts=row.restarts,
            step=row.step,
            step_rate=_finite_or_none(row.step_rate),
            last_heard=row.last_heard,
            silent_s=row.silent_for(now),
            exit_code=row.exit_code,
            reason=row.reason,
            latest=dict(latest.get(row.rank, {})),
        )


_WORKER_SPEAKS: Final = frozenset(
    {"hello", "metric", "checkpoint", "result", "error", "done", "log"}
)
_HANDLERS: Final = {
    "job": JobMonitor._on_job,
    "restart": JobMonitor._on_restart,
    "rank": JobMonitor._on_rank,
    "hello": JobMonitor._on_hello,
    "metric": JobMonitor._on_metric,
    "checkpoint": JobMonitor._on_checkpoint,
    "result": JobMonitor._on_result,
    "error": JobMonitor._on_error,
    "done": JobMonitor._on_done,
    "log": JobMonitor._on_log,
}
