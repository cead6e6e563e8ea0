"""JobMonitor: the state of one job, built from its event stream.

Pure (no I/O, no threads of its own) and thread-safe: a reader thread calls
:meth:`JobMonitor.feed` while the kernel thread reads; one lock guards all
state and every reader returns copies or immutable values. Widgets and the
text fallback (:func:`format_text`) only render what this module keeps.

Times are the ``t`` of the events (Unix seconds); methods that need the
current time take ``now`` (default: :func:`time.time`).
"""

from __future__ import annotations

import math
import statistics
import threading
import time
from array import array
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any, Final, NamedTuple, TypedDict

import numpy as np
from numpy.typing import NDArray

from .events import JOB_STATES, TERMINAL_STATES, Event, JobState
from .logbuffer import JOB_RANK, Divergence, FoldedLine, LogBuffer, LogLine, Search, rank_label
from .logbuffer import format_ranks as format_ranks
from .units import duration, format_bytes

__all__ = [
    "RANK_STATES",
    "Checkpoint",
    "ErrorInfo",
    "Failure",
    "JobMonitor",
    "RankState",
    "Series",
    "Snapshot",
    "format_ranks",
    "format_text",
]

#: States of a rank row. Exited: the process ended with code 0 without ``done``.
RANK_STATES: Final = (
    "Pending",
    "Running",
    "Restarting",
    "Succeeded",
    "Failed",
    "Stopped",
    "Exited",
)

#: A float in a JSON-able snapshot: non-finite values become ``"NaN"``,
#: ``"Infinity"`` or ``"-Infinity"`` (what JavaScript's ``Number()`` parses).
JSONFloat = float | str


# --------------------------------------------------------------------------- records


@dataclass
class RankState:
    """One row of the worker table (a copy when returned by the monitor).

    ``node`` defaults to ``rank // nproc`` and ``local_rank`` to
    ``rank % nproc`` until a ``hello`` or backend event says otherwise.
    ``step_rate`` is steps/s over the last ``rate_window`` seconds of this
    rank's metrics. ``exit_code``/``reason`` explain a failure or exit.
    """

    rank: int
    node: int
    local_rank: int
    host: str = ""
    pod: str = ""
    pid: int | None = None
    state: str = "Pending"
    restarts: int = 0
    step: int | None = None
    step_rate: float | None = None
    last_heard: float | None = None
    exit_code: int | None = None
    reason: str = ""
    versions: dict[str, Any] = field(default_factory=dict)

    def silent_for(self, now: float) -> float | None:
        """Seconds since the worker last printed anything, ``None`` if never."""
        return None if self.last_heard is None else max(0.0, now - self.last_heard)


class Series(NamedTuple):
    """Points of one metric of one rank (float64 arrays, copies)."""

    steps: NDArray[np.float64]
    times: NDArray[np.float64]
    values: NDArray[np.float64]


class Checkpoint(NamedTuple):
    """A checkpoint a rank reported as completely written."""

    step: int
    uri: str
    bytes: int | None
    rank: int | None
    t: float


class ErrorInfo(NamedTuple):
    """An exception that escaped user code (``rank`` is ``None`` if job-wide)."""

    rank: int | None
    t: float
    type: str
    message: str
    traceback: str


class Failure(NamedTuple):
    """A rank failure: an ``error`` event or a non-zero exit (``attempt`` counts restarts)."""

    t: float
    rank: int
    reason: str
    attempt: int


# --------------------------------------------------------------------------- snapshot shapes


class RankRow(TypedDict):
    """:class:`RankState` as JSON, plus ``silent_s`` and the rank's latest metric values."""

    rank: int
    node: int
    local_rank: int
    host: str
    pod: str
    pid: int | None
    state: str
    restarts: int
    step: int | None
    step_rate: float | None
    last_heard: float | None
    silent_s: float | None
    exit_code: int | None
    reason: str
    latest: dict[str, JSONFloat]


class FailureRow(TypedDict):
    rank: int
    t: float
    reason: str


class MetricRow(TypedDict):
    """Latest value of one metric: over each rank's last point."""

    step: int
    mean: JSONFloat
    min: JSONFloat
    max: JSONFloat
    ranks: int


class CheckpointRow(TypedDict):
    step: int
    uri: str
    bytes: int | None
    rank: int | None
    t: float


class ErrorRow(TypedDict):
    rank: int | None
    t: float
    type: str
    message: str
    traceback: str


class LogSummary(TypedDict):
    kept: int
    total: int
    dropped: int


class Snapshot(TypedDict):
    """Everything a dashboard or the text fallback shows, JSON-able.

    ``elapsed`` runs from the first event to the terminal event (or ``now``).
    ``step`` is the highest step any rank reached; ``steps_per_s`` the
    overall rate (see :meth:`JobMonitor.steps_per_second`).
    """

    name: str
    backend: str
    dist_backend: str | None
    state: str
    reason: str
    message: str
    world_size: int
    nodes: int
    nproc: int
    restarts: int
    created: float | None
    started: float | None
    ended: float | None
    now: float
    elapsed: float
    step: int | None
    steps_per_s: float | None
    ranks: list[RankRow]
    first_failure: FailureRow | None
    stragglers: list[int]
    metrics: dict[str, MetricRow]
    checkpoints: list[CheckpointRow]
    errors: list[ErrorRow]
    has_result: bool
    logs: LogSummary
    version: int


# --------------------------------------------------------------------------- storage


class _Points:
    """Append-only (step, t, value) columns in compact ``array('d')`` storage."""

    __slots__ = ("steps", "times", "values")

    def __init__(self) -> None:
        self.steps = array("d")
        self.times = array("d")
        self.values = array("d")

    def __len__(self) -> int:
        return len(self.values)

    def slice(self, start: int = 0) -> Series:
        return Series(_np(self.steps, start), _np(self.times, start), _np(self.values, start))


def _np(column: array[float], start: int) -> NDArray[np.float64]:
    return np.frombuffer(column, dtype=np.float64)[start:].copy()


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
        self._checkpoints: list[Checkpoint] = []
        self._result: Event | None = None
        self._logs = LogBuffer(log_limit)
        # metrics: per (name, rank) points, and one row per metric event
        self._points: dict[str, dict[int, _Points]] = {}
        self._ev_rank = array("q")
        self._ev_step = array("d")
        self._ev_t = array("d")
        self._ev_names = array("q")
        self._name_sets: list[tuple[str, ...]] = []
        self._name_set_ids: dict[tuple[str, ...], int] = {}
        self._first_metric: tuple[float, int] | None = None
        self._frontier: tuple[float, int] | None = None

    # ------------------------------------------------------------------ feeding

    def feed(self, event: Event) -> None:
        """Apply one event (any kind; unknown kinds only count as activity)."""
        with self._lock:
            self._apply(event)

    def feed_many(self, events: Iterable[Event]) -> None:
        """Apply events in order under one lock acquisition."""
        with self._lock:
            for event in events:
                self._apply(event)

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
        names: list[str] = []
        if isinstance(values, dict):
            for name, value in values.items():
                if isinstance(name, str) and isinstance(value, int | float):
                    points = self._points.setdefault(name, {}).get(row.rank)
                    if points is None:
                        points = self._points[name][row.rank] = _Points()
                    points.steps.append(step)
                    points.times.append(ev.t)
                    points.values.append(float(value))
                    names.append(name)
        key = tuple(names)
        set_id = self._name_set_ids.get(key)
        if set_id is None:
            set_id = self._name_set_ids[key] = len(self._name_sets)
            self._name_sets.append(key)
        self._ev_rank.append(row.rank)
        self._ev_step.append(step)
        self._ev_t.append(ev.t)
        self._ev_names.append(set_id)

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

    def errors(self) -> list[ErrorInfo]:
        """Every ``error`` event in arrival order."""
        with self._lock:
            return list(self._errors)

    # ------------------------------------------------------------------ metrics

    def metric_names(self) -> list[str]:
        """Metric names in order of first appearance."""
        with self._lock:
            return list(self._points)

    def metric_ranks(self, name: str) -> list[int]:
        """Ranks that reported ``name``, sorted."""
        with self._lock:
            return sorted(self._points.get(name, {}))

    def series_length(self, name: str, rank: int) -> int:
        """Number of points of ``name`` from ``rank`` (the next index for :meth:`points_since`)."""
        with self._lock:
            points = self._points.get(name, {}).get(rank)
            return 0 if points is None else len(points)

    def series(self, name: str, rank: int, *, by_step: bool = False) -> Series:
        """All points of ``name`` from ``rank`` in arrival order (empty if none).

        After a restart steps may repeat; ``by_step=True`` returns one point
        per step (the latest), sorted by step.
        """
        with self._lock:
            points = self._points.get(name, {}).get(rank)
            series = _EMPTY if points is None else points.slice()
        return _latest_by_step(series) if by_step else series

    def points_since(self, name: str, rank: int, index: int) -> Series:
        """Points from position ``index`` on, for incremental plotting.

        Series only grow, so a consumer keeps ``index += len(result.steps)``.
        """
        with self._lock:
            points = self._points.get(name, {}).get(rank)
            return _EMPTY if points is None else points.slice(max(0, index))

    def mean_series(self, name: str) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """``(steps, means)``: per step, the mean over the ranks that reported it.

        Each rank contributes its latest value for a step; a NaN value makes
        that step's mean NaN.
        """
        with self._lock:
            per_rank = [points.slice() for points in self._points.get(name, {}).values()]
        if not per_rank:
            return np.empty(0), np.empty(0)
        latest = [_latest_by_step(s) for s in per_rank]
        steps = np.concatenate([s.steps for s in latest])
        values = np.concatenate([s.values for s in latest])
        unique, inverse = np.unique(steps, return_inverse=True)
        sums = np.bincount(inverse, weights=values, minlength=unique.size)
        counts = np.bincount(inverse, minlength=unique.size)
        return unique, sums / counts

    def metrics_table(self) -> list[dict[str, float | int]]:
        """One row per metric event: ``rank``, ``step``, ``t`` and each reported value."""
        cols, present = self._metric_columns()
        base = zip(cols["rank"].tolist(), cols["step"].tolist(), cols["t"].tolist(), strict=True)
        rows: list[dict[str, float | int]] = [{"rank": r, "step": s, "t": t} for r, s, t in base]
        for name, mask in present.items():
            values = cols[name].tolist()
            for i in np.flatnonzero(mask).tolist():
                rows[i][name] = values[i]
        return rows

    def metrics_columns(self) -> dict[str, NDArray[Any]]:
        """:meth:`metrics_table` as columns (NaN where an event lacks a metric)."""
        return self._metric_columns()[0]

    def _metric_columns(self) -> tuple[dict[str, NDArray[Any]], dict[str, NDArray[np.bool_]]]:
        """Columns plus, per metric, which events carry it.

        The k-th event of rank r that carries a metric holds the k-th point of
        that metric's (name, r) series, so a stable sort of those events by
        rank lines them up with the series concatenated in rank order.
        """
        with self._lock:
            ranks = np.frombuffer(self._ev_rank, dtype=np.int64).copy()
            set_ids = np.frombuffer(self._ev_names, dtype=np.int64)
            cols: dict[str, NDArray[Any]] = {
                "rank": ranks,
                "step": np.frombuffer(self._ev_step, dtype=np.float64).astype(np.int64),
                "t": np.frombuffer(self._ev_t, dtype=np.float64).copy(),
            }
            present: dict[str, NDArray[np.bool_]] = {}
            for name, by_rank in self._points.items():
                has = np.array([name in names for names in self._name_sets], dtype=bool)
                mask = has[set_ids]
                where = np.flatnonzero(mask)
                order = where[np.argsort(ranks[where], kind="stable")]
                column = np.full(ranks.size, np.nan)
                column[order] = np.concatenate(
                    [np.frombuffer(by_rank[r].values, dtype=np.float64) for r in sorted(by_rank)]
                )
                cols[name] = column
                present[name] = mask
            return cols, present

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
        self._logs.append(rank, ev.t, _str(ev.get("text")))

    # ------------------------------------------------------------------ snapshot

    def snapshot(self, now: float | None = None) -> Snapshot:
        """A JSON-able summary of everything shown (see :class:`Snapshot`)."""
        with self._lock:
            at = _now(now)
            latest = self._latest_values()
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
                metrics=self._metric_rows(),
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
            )

    def _latest_values(self) -> dict[int, dict[str, JSONFloat]]:
        out: dict[int, dict[str, JSONFloat]] = {}
        for name, by_rank in self._points.items():
            for rank, points in by_rank.items():
                out.setdefault(rank, {})[name] = _json_float(points.values[-1])
        return out

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

    def _metric_rows(self) -> dict[str, MetricRow]:
        rows: dict[str, MetricRow] = {}
        for name, by_rank in self._points.items():
            values = [points.values[-1] for points in by_rank.values()]
            step = max(int(points.steps[-1]) for points in by_rank.values())
            rows[name] = MetricRow(
                step=step,
                mean=_json_float(math.fsum(values) / len(values)),
                min=_json_float(_nan_min(values)),
                max=_json_float(_nan_max(values)),
                ranks=len(values),
            )
        return rows


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
_EMPTY: Final = Series(np.empty(0), np.empty(0), np.empty(0))


# --------------------------------------------------------------------------- helpers


def _now(now: float | None) -> float:
    return time.time() if now is None else now


def _int(value: Any) -> int | None:
    """An int from an int or an integral float; ``None`` otherwise (bools too)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _json_float(value: float) -> JSONFloat:
    if math.isfinite(value):
        return value
    if math.isnan(value):
        return "NaN"
    return "Infinity" if value > 0 else "-Infinity"


def _finite_or_none(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def _nan_min(values: list[float]) -> float:
    return math.nan if any(math.isnan(v) for v in values) else min(values)


def _nan_max(values: list[float]) -> float:
    return math.nan if any(math.isnan(v) for v in values) else max(values)


def _latest_by_step(series: Series) -> Series:
    """One point per step (the last one to arrive), sorted by step."""
    if series.steps.size == 0:
        return series
    backwards = series.steps[::-1]
    _, first = np.unique(backwards, return_index=True)
    pick = series.steps.size - 1 - first
    return Series(series.steps[pick], series.times[pick], series.values[pick])


# --------------------------------------------------------------------------- text fallback


def format_text(snap: Snapshot, *, max_rows: int = 64) -> str:
    """A plain-text summary of a snapshot: header, rank table, metrics, errors.

    With more than ``max_rows`` ranks, ranks that need attention (failed,
    stragglers, not Running/Succeeded) are shown first and the rest counted.
    """
    lines = [_header(snap)]
    if snap["reason"] or snap["message"]:
        lines.append("  " + ": ".join(p for p in (snap["reason"], snap["message"]) if p))
    failure = snap["first_failure"]
    if failure is not None:
        lines.append(f"first failure: rank {failure['rank']}: {failure['reason']}")
    if snap["stragglers"]:
        lines.append(f"stragglers: ranks {format_ranks(snap['stragglers'])}")
    lines.append("")
    lines.extend(_rank_table(snap, max_rows))
    if snap["metrics"]:
        lines.append("")
        lines.append("metrics (latest per rank):")
        for name, m in snap["metrics"].items():
            spread = "" if m["ranks"] < 2 else f", min {_num(m['min'])}, max {_num(m['max'])}"
            lines.append(
                f"  {name} {_num(m['mean'])} (step {m['step']}, "
                f"{m['ranks']} rank{'s' if m['ranks'] != 1 else ''}{spread})"
            )
    if snap["checkpoints"]:
        last = snap["checkpoints"][-1]
        size = "" if last["bytes"] is None else f", {format_bytes(last['bytes'])}"
        lines.append(
            f"checkpoints: {len(snap['checkpoints'])}, latest step {last['step']}: "
            f"{last['uri']}{size}"
        )
    if snap["has_result"]:
        lines.append("result: available")
    lines.extend(_error_lines(snap["errors"]))
    return "\n".join(lines)


def _header(snap: Snapshot) -> str:
    backend = snap["backend"] + (f"/{snap['dist_backend']}" if snap["dist_backend"] else "")
    parts = [
        f"{snap['name']} [{backend}] {snap['state']}",
        duration(snap["elapsed"]),
        f"world {snap['world_size']} ({snap['nodes']}x{snap['nproc']})",
    ]
    if snap["step"] is not None:
        parts.append(f"step {snap['step']}")
    if snap["steps_per_s"] is not None:
        parts.append(f"{snap['steps_per_s']:.3g} steps/s")
    if snap["restarts"]:
        parts.append(f"{snap['restarts']} restart{'s' if snap['restarts'] != 1 else ''}")
    return " | ".join(parts)


def _rank_table(snap: Snapshot, max_rows: int) -> list[str]:
    rows = snap["ranks"]
    shown = rows
    if len(rows) > max_rows:
        lagging = set(snap["stragglers"])
        first = snap["first_failure"]
        urgent = [
            r["rank"]
            for r in rows
            if r["state"] not in ("Running", "Succeeded")
            or r["rank"] in lagging
            or (first is not None and r["rank"] == first["rank"])
        ]
        flagged = set(urgent)
        keep = set((urgent + [r["rank"] for r in rows if r["rank"] not in flagged])[:max_rows])
        shown = [r for r in rows if r["rank"] in keep]
    header = ("rank", "node", "host", "state", "restarts", "step", "steps/s", "heard", "exit")
    table = [header] + [
        (
            str(r["rank"]),
            str(r["node"]),
            r["pod"] or r["host"] or "-",
            r["state"],
            str(r["restarts"]),
            "-" if r["step"] is None else str(r["step"]),
            "-" if r["step_rate"] is None else f"{r['step_rate']:.3g}",
            "-" if r["silent_s"] is None else f"{duration(r['silent_s'])} ago",
            _exit(r),
        )
        for r in shown
    ]
    widths = [max(len(row[i]) for row in table) for i in range(len(header) - 1)]
    out = [
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=False)) + "  " + row[-1]
        for row in table
    ]
    out = [line.rstrip() for line in out]
    hidden = len(rows) - len(shown)
    if hidden:
        counts: dict[str, int] = {}
        visible = {r["rank"] for r in shown}
        for r in rows:
            if r["rank"] not in visible:
                counts[r["state"]] = counts.get(r["state"], 0) + 1
        states = ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
        out.append(f"... {hidden} more ranks ({states})")
    return out


def _exit(row: RankRow) -> str:
    code = "" if row["exit_code"] is None else f"exit {row['exit_code']}"
    reason = row["reason"]
    if len(reason) > 80:
        reason = reason[:77] + "..."
    if code and reason and f"exit code {row['exit_code']}" not in reason:
        return f"{code}: {reason}"
    return reason or code


def _error_lines(errors: list[ErrorRow]) -> list[str]:
    if not errors:
        return []
    groups: dict[tuple[str, str], list[int | None]] = {}
    for e in errors:
        groups.setdefault((e["type"], e["message"]), []).append(e["rank"])
    lines = ["", "errors:"]
    for (kind, message), ranks in groups.items():
        known = [r for r in ranks if r is not None]
        who = "job" if not known else rank_label(tuple(sorted(set(known))))
        lines.append(f"  {who}: {kind}: {message}" if message else f"  {who}: {kind}")
    tb = [line for line in errors[0]["traceback"].splitlines() if line.strip()]
    if tb:
        lines.append(f"traceback (rank {errors[0]['rank']}, last lines):")
        lines.extend("    " + line for line in tb[-8:])
    return lines


def _num(value: JSONFloat) -> str:
    return value.lower() if isinstance(value, str) else f"{value:.6g}"
