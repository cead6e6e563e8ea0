"""Records and snapshot shapes of a job's state, and small pure helpers the monitor uses."""

from __future__ import annotations

import time
from array import array
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final, NamedTuple, TypedDict, cast

import numpy as np
from numpy.typing import NDArray

from ..events import StagingFields
from ..runtime.numbers import JSONFloat as JSONFloat  # a snapshot field type, named here too
from .phases import PhaseRow

#: States of a rank row. Exited: the process ended with code 0 without ``done``;
#: Ready: a session's rank that finished its cell and waits for the next one; Raised: a
#: session's rank whose cell raised (the process lives on, ready for the next cell).
RANK_STATES: Final = (
    "Pending",
    "Running",
    "Restarting",
    "Succeeded",
    "Failed",
    "Stopped",
    "Exited",
    "Ready",
    "Raised",
    "Paused",
)


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
    # the latest ``resources`` figures (None: never read; see :class:`~..events.ResourcesFields`)
    cpu_pct: float | None = None
    rss_bytes: int | None = None
    mem_limit_bytes: int | None = None
    gpu_util_pct: float | None = None
    gpu_mem_bytes: int | None = None

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
    """An exception that escaped user code (``rank`` is ``None`` if job-wide).

    ``attempt`` counts the restarts before it.
    """

    rank: int | None
    t: float
    type: str
    message: str
    traceback: str
    attempt: int = 0


class Failure(NamedTuple):
    """A rank failure: an ``error`` event or a non-zero exit (``attempt`` counts restarts).

    ``category`` is its class (:data:`~.cause.CLASSES`): ``raised``, ``exited``,
    ``killed`` or ``consequence``.
    """

    t: float
    rank: int
    reason: str
    attempt: int
    category: str = "raised"


# --------------------------------------------------------------------------- snapshot shapes


class RankJSON(TypedDict):
    """One rank as the sidebar sees it (``IRank`` in ``labextension/src/types.ts``).

    Its latest metric values and resource figures (None: absent). The one
    schema of a rank: :class:`RankRow` adds the monitor's own fields, and
    :func:`rank_json` cuts a row down to these.
    """

    rank: int
    node: int
    local_rank: int
    host: str
    state: str
    restarts: int
    step: int | None
    exit_code: int | None
    reason: str
    latest: dict[str, JSONFloat]
    cpu_pct: float | None
    rss_bytes: int | None
    mem_limit_bytes: int | None
    gpu_util_pct: float | None
    gpu_mem_bytes: int | None


class RankRow(RankJSON):
    """:class:`RankState` as JSON: :class:`RankJSON` plus where it runs and how it reports."""

    pod: str
    pid: int | None
    step_rate: float | None
    last_heard: float | None
    silent_s: float | None
    stalled: bool  # Running, and no report() for longer than its own interval allows


def rank_json(row: RankRow) -> RankJSON:
    """The :class:`RankJSON` fields of ``row``, in their order."""
    fields = cast(dict[str, Any], row)
    return cast(RankJSON, {name: fields[name] for name in RankJSON.__annotations__})


class ProgressRow(TypedDict):
    """Rank 0's progress: ``step`` of ``total`` steps done, ``fraction`` in [0, 1].

    ``rate_per_s`` is steps/s over the last minute of progress; ``eta_s`` the
    seconds left at that rate (0 when done; None while unknown or once the job ended).
    """

    step: int
    total: int
    fraction: float
    eta_s: float | None
    rate_per_s: float | None


class FailureRow(TypedDict):
    rank: int
    t: float
    reason: str


class CauseRow(TypedDict):
    """The root cause (:class:`~.cause.Cause`) as JSON; ``line`` is what every view shows."""

    rank: int
    category: str
    reason: str
    consequences: list[int]
    line: str


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


class SlowRow(TypedDict):
    """A rank slower per step than the median: its own step time and ``factor`` x the median."""

    rank: int
    node: int
    step_s: float
    factor: float


class StateRange(TypedDict):
    """The ranks in one state: ``count`` of them, ``ranks`` as ranges (``0-4095, 4100-8191``)."""

    state: str
    count: int
    ranks: str
    nodes: str  # the nodes they run on, as ranges


class Snapshot(TypedDict):
    """Everything a dashboard or the text fallback shows, JSON-able.

    ``elapsed`` runs from the first event to the terminal event (or ``now``).
    ``step`` is the highest step any rank reached; ``steps_per_s`` the
    overall rate (see :meth:`JobMonitor.steps_per_second`; None while
    ``stalled``: a rate nobody keeps up is not shown as current); ``progress``
    rank 0's steps done of a known total, None without one.
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
    stalled: bool  # running, and every rank that reported a rate stopped reporting
    ranks: list[RankRow]
    first_failure: FailureRow | None
    why: str  # the one line why the job is in its state (JobMonitor.reason)
    cause: CauseRow | None  # the root cause of the current attempt's failures
    recovered: str  # "recovered from 1 failure (rank 1: ...)": history, "" without
    stragglers: list[int]
    slow: list[SlowRow]  # ranks slower per step than the median (see monitor.scale)
    slow_line: str  # "ranks 517, 2051 are 1.8x slower per step than the median" ("" none)
    summary: list[StateRange]  # the ranks by state, largest group first
    metrics: dict[str, MetricRow]
    checkpoints: list[CheckpointRow]
    errors: list[ErrorRow]
    has_result: bool
    logs: LogSummary
    version: int
    diagnosis: str | None
    staging: list[StagingFields]  # every field present
    warnings: list[str]
    phases: list[PhaseRow]  # the start-up phases the backend observes (see phases.py)
    phase: str | None  # the phase the job is in now, None once through them or ended
    first_step_s: float | None  # seconds from submit to the first report()
    progress: ProgressRow | None


# --------------------------------------------------------------------------- storage


class PointColumns:
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


# --------------------------------------------------------------------------- helpers


def now_or_clock(now: float | None) -> float:
    return time.time() if now is None else now


def as_int(value: Any) -> int | None:
    """An int from an int or an integral float; ``None`` otherwise (bools too)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


def as_str(value: Any) -> str:
    return value if isinstance(value, str) else ""


def latest_by_step(series: Series) -> Series:
    """One point per step (the last one to arrive), sorted by step."""
    if series.steps.size == 0:
        return series
    backwards = series.steps[::-1]
    _, first = np.unique(backwards, return_index=True)
    pick = series.steps.size - 1 - first
    return Series(series.steps[pick], series.times[pick], series.values[pick])


EMPTY_SERIES: Final = Series(np.empty(0), np.empty(0), np.empty(0))


def mean_by_step(series: Sequence[Series]) -> Series:
    """The mean across ranks: per step, the mean time and value of each rank's latest point.

    ``series`` holds one :class:`Series` per rank; the result is sorted by step.
    """
    latest = [latest_by_step(s) for s in series if s.steps.size]
    if not latest:
        return EMPTY_SERIES
    steps = np.concatenate([s.steps for s in latest])
    unique, inverse = np.unique(steps, return_inverse=True)
    counts = np.bincount(inverse, minlength=unique.size)
    times = np.bincount(inverse, np.concatenate([s.times for s in latest]), unique.size) / counts
    values = np.bincount(inverse, np.concatenate([s.values for s in latest]), unique.size) / counts
    return Series(unique, times, values)


#: Log lines a monitor keeps per rank by default.
LOG_LIMIT = 2000


class BookSettings(TypedDict, total=False):
    """How a book reads its job (every key optional, defaults in brackets).

    ``log_limit``: log lines kept per rank [:data:`LOG_LIMIT`];
    ``straggler_steps`` / ``straggler_fraction``: how far behind the median step a
    straggler is [10 steps, 20 %]; ``rate_window``: seconds of metrics a rank's
    steps/s is measured over [30]; ``phases``: the start-up phases the backend
    observes (its ``Capabilities.phases``) [none]; ``max_restarts``: the launcher's
    restarts after a failure [0].
    """

    log_limit: int
    straggler_steps: int
    straggler_fraction: float
    rate_window: float
    phases: Sequence[str]
    max_restarts: int
