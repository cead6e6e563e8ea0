"""JobMonitor: the state of one job, built from its event stream.

Pure (no I/O, no threads of its own) and thread-safe: a reader thread calls
:meth:`JobMonitor.feed` while the kernel thread reads; one lock guards all
state and every reader returns copies or immutable values. The monitor is
the single owner of a job's state, result, errors and diagnosis: a
:class:`~jupyter_disttrain.job.Job` is a handle over it, and widgets, the
text view, the sidebar and the command line only render what it keeps.

The parts that keep the facts (failures, pace, stacks, communication,
metrics, logs, phases, progress, pauses; see :mod:`.state`) each own their
fields and are pure; the monitor's one lock guards them all, and the readers
here ask them through their methods and combine the answers.

Times are the ``t`` of the events (Unix seconds); methods that need the
current time take ``now`` (default: :func:`time.time`).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable
from dataclasses import replace
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ..events import TERMINAL_STATES, Event, JobState
from ..logbuffer import Divergence, FoldedLine, LogLine, Search
from ..nccl import NcclSummary
from ..runtime.numbers import finite_or_none
from .cause import Cause, cell_line, comms_names_cause, recovered_text
from .hung import hung_rows
from .network import failed_sentence, partition_of, partition_sentence, place
from .raised import raised_sentence, shown_end
from .records import (
    Checkpoint,
    ErrorInfo,
    Failure,
    LogSummary,
    RankState,
    Series,
    SlowRow,
    Snapshot,
    as_str,
    now_or_clock,
)
from .rows import (
    cause_row,
    checkpoint_row,
    error_row,
    failure_row,
    rank_row,
    staging_row,
)
from .scale import slow_ranks, slow_sentence, state_ranges, summarised
from .state import MonitorState
from .where import Where, where_from

#: The metric a rank may report as its own seconds of work per step (see JobMonitor.slow).
STEP_TIME = "step_time"
#: Rank states of a rank that will send no more stacks.
_ENDED_RANK = frozenset({"Succeeded", "Failed", "Stopped", "Exited"})


class JobMonitor(MonitorState):
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

    ``phases`` (constructor): the start-up phases the backend observes (its
    ``Capabilities.phases``); the snapshot's timeline has a row for each.
    """

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
    def display_state(self) -> str:
        """The state to show: the job state, ``Hung`` while a detected hang lasts, ``Paused``
        in the debugger, ``Raised`` for a session cell that raised (see :mod:`.raised`)."""
        with self._lock:
            return self._display_state()

    def _display_state(self, now: float | None = None) -> str:
        if self._state == "Running" and self._pauses.ranks(self._rows):
            return "Paused"
        if self._state == "Running" and self._hang(now) is not None:
            return "Hung"
        return shown_end(self._state, self._rows)  # Raised: a session cell raised

    @property
    def reason(self) -> str:
        """Why the job is in its state, the one line every view shows (see :meth:`cause`).

        Failed: the root cause and its consequences; Restarting: the cause it
        restarts after; otherwise what the backend said (why it waits, how it ended).
        """
        with self._lock:
            return self._why()

    def _why(self) -> str:
        cause = self._cause()
        said = self._message or self._reason
        if self._state == "Failed":
            return self._cause_line(cause) if cause is not None else said
        if self._restart_due and self._state == "Restarting" and cause is not None:
            return f"restarting after {self._cause_line(cause)}"  # the launcher restarts
        recovered = self._faults.recovered() if self._state == "Restarting" else []
        if recovered:
            return f"restarting after {self._cause_line(recovered[-1])}"
        return said

    def _cause_line(self, cause: Cause) -> str:
        """``cause``'s line, in the diagnosis's words where those name where ranks run: the
        ranks cut off from each other, a killed rank's node and pod (a node that died)."""
        cut = partition_of(cause, self._rows)
        if cut is not None:
            return cut
        if cause.category == "killed" and not cause.same and place(self._rows.get(cause.rank)):
            return failed_sentence(cause, cell_line(self._faults.errors(), cause), self._rows)
        return cause.line()

    def cause(self) -> Cause | None:
        """The root cause of the current attempt's failures (see :mod:`.cause`), or None."""
        with self._lock:
            return self._cause()

    def recovered(self) -> list[Cause]:
        """The causes of the earlier attempts a restart recovered from, oldest first."""
        with self._lock:
            return self._faults.recovered()

    def cause_error(self) -> Event | None:
        """The ``error`` event of the cause's rank (its first of the attempt), or None."""
        with self._lock:
            cause = self._cause()
            if cause is None:
                return None
            return self._faults.error_event(cause.rank, cause.attempt)

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
            return self._comms.summary()

    def diagnosis(self) -> str | None:
        """The job's current one-sentence reading (communication, hang or failure), or None.

        A communication failure wins; a hang is read while the job runs and no
        rank wrote anything since its stacks were taken.
        """
        with self._lock:
            return self._diagnosis()

    def _diagnosis(self, now: float | None = None) -> str | None:
        """A stop or a success has none; a rank's own error outranks what the logs say."""
        if self._state in ("Stopped", "Succeeded"):
            return None
        for staged in self._staging.values():
            if staged.get("state") == "failed":
                return f"Data staging failed: {as_str(staged.get('message'))}"
        if self._state not in TERMINAL_STATES and (paused := self._pauses.ranks(self._rows)):
            return "; ".join(p.sentence() for p in paused)  # stopped in the debugger: no hang
        hang = self._hang()
        if hang is not None and self._state not in TERMINAL_STATES:
            return hang.sentence()
        if (ready := raised_sentence(self._state, self._rows)) is not None:
            return ready
        cause = self._cause()
        own = cause is not None and cause.category in ("raised", "exited")
        cut = partition_sentence(cause, self._faults.recovered(), self._rows)
        if cut := cut or self._comms.unresolved(self._rows):
            return cut  # who cannot reach whom, or the name no launcher could resolve
        comms = self.comms()
        if not own and comms.failure != "none" and comms.diagnosis and comms_names_cause(comms):
            return comms.diagnosis
        if self._state == "Failed" and cause is not None:
            return failed_sentence(cause, cell_line(self._faults.errors(), cause), self._rows)
        if self._state == "Failed" and (self._message or self._reason):
            return f"the job failed: {self._message or self._reason}"
        if self._state == "Running" and (slow := self._slow(now)):
            return slow_sentence(slow, nodes=self._large())
        return None

    def where(self, request: str | None = None) -> Where | None:
        """The stacks of ``request`` (default: the newest), grouped; None if none arrived."""
        with self._lock:
            if request is None:
                request = self._stacks.newest()
            if request is None or self._stacks.of(request) is None:
                return None
            return self._where(request)

    def wait_for_stacks(self, request: str, timeout: float) -> Where | None:
        """Wait until every rank that is still up sent its stacks for ``request``.

        Returns what arrived by then (None when nothing did).
        """

        with self._changed:
            self._changed.wait_for(
                lambda: self._stacks.complete(request, self._up()), timeout=timeout
            )
            if self._stacks.of(request) is None:
                return None
            return self._where(request)

    def hang(self) -> Where | None:
        """The newest hang's stacks while no rank wrote anything since; else None."""
        with self._lock:
            return self._hang()

    def _hang(self, now: float | None = None) -> Where | None:
        request = self._stacks.hang(now_or_clock(now), self._up)
        return None if request is None else self._where(request)

    def _up(self) -> list[int]:
        """The ranks that may still send stacks."""
        return [r.rank for r in self._rows.values() if r.state not in _ENDED_RANK]

    def _where(self, request: str) -> Where:
        """The stacks of ``request`` grouped; a large job's sentence names nodes too."""
        nodes = {r: row.node for r, row in self._rows.items()} if self._large() else None
        return where_from(request, self._stacks.of(request) or {}, self._world_size, nodes)

    def _large(self) -> bool:
        return summarised(self._world_size)

    def slow(self, now: float | None = None) -> list[SlowRow]:
        """Running ranks whose own step time is far above the median (see :mod:`.scale`).

        A rank's step time is its ``step_time`` metric (seconds of its own work
        per step) where the ranks report one, else the interval between its
        steps; a stalled rank has none.
        """
        with self._lock:
            return self._slow(now)

    def _slow(self, now: float | None = None) -> list[SlowRow]:
        at = now_or_clock(now)
        own = self._metrics.latest_of(STEP_TIME)
        times: dict[int, float] = {}
        for rank, row in self._rows.items():
            if row.state != "Running" or self._pace.stalled(rank, at):
                continue
            if own:
                if rank in own and math.isfinite(own[rank]):
                    times[rank] = own[rank]
            elif row.step_rate:
                times[rank] = 1.0 / row.step_rate
        return slow_ranks(times, {r: row.node for r, row in self._rows.items()})

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
            end = self._end_t if self._end_t is not None else now_or_clock(now)
            return max(0.0, end - self._first_t)

    def steps_per_second(self) -> float | None:
        """Overall rate: (highest step - first step) / time between those metrics.

        Restart downtime counts as time; ``None`` before two distinct steps half a second
        apart (:data:`~.pace.MIN_RATE_SPAN_S`).
        """
        with self._lock:
            return self._pace.overall()

    @property
    def rate_window(self) -> float:
        """Seconds of recent metrics a rank's steps/s is measured over."""
        return self._pace.rate_window

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
            return self._faults.failures()

    def first_failure(self) -> tuple[int, str] | None:
        """``(rank, reason)`` of the earliest failure (by event time) since the last restart."""
        with self._lock:
            found = self._first_failure()
            return None if found is None else (found.rank, found.reason)

    def _first_failure(self) -> Failure | None:
        cause = self._cause()
        if cause is None:
            return None
        return Failure(cause.t, cause.rank, cause.reason, cause.attempt, cause.category)

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
            at = now_or_clock(now)
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
            return self._faults.error_events()

    def errors(self) -> list[ErrorInfo]:
        """Every ``error`` event in arrival order."""
        with self._lock:
            return self._faults.errors()

    # ------------------------------------------------------------------ metrics

    def metric_names(self) -> list[str]:
        """Metric names in order of first appearance."""
        return self._metrics.names()

    def metric_ranks(self, name: str) -> list[int]:
        """Ranks that reported ``name``, sorted."""
        return self._metrics.ranks(name)

    def latest_values_of(self, name: str) -> dict[int, float]:
        """Per rank that reported ``name``, its last value."""
        return self._metrics.latest_of(name)

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

    # ------------------------------------------------------------------ snapshot

    def snapshot(self, now: float | None = None) -> Snapshot:
        """A JSON-able summary of everything shown (see :class:`Snapshot`)."""
        with self._lock:
            at = now_or_clock(now)
            latest = self._metrics.latest_values()
            failure = self._first_failure()
            frontier = self._pace.frontier
            phases = self._phase_log.timeline(self.phases, self._world_size, at)
            cause = self._cause()
            ranks = [
                rank_row(
                    row, at, row.state == "Running" and self._pace.stalled(row.rank, at), latest
                )
                for _, row in sorted(self._rows.items())
            ]
            hang = self._hang(at) if self._display_state(at) == "Hung" else None
            ranks = hung_rows(ranks, hang)  # who holds the others up, where each rank is
            rated = [r for r in ranks if r["state"] == "Running" and r["step"] is not None]
            live = self._state not in TERMINAL_STATES and (
                self._display_state(at) == "Hung"
                or (bool(rated) and all(r["stalled"] for r in rated))
            )
            stalled = live or self._ended_stalled()
            slow = self._slow(at) if self._state == "Running" else []
            errors = self._faults.current_errors(self._attempt, self._state == "Stopped")
            return Snapshot(
                name=self.name,
                backend=self.backend,
                dist_backend=self._dist_backend,
                state=self._display_state(at),
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
                steps_per_s=None if stalled else finite_or_none(self.steps_per_second()),
                stalled=stalled,
                ranks=ranks,
                first_failure=None if failure is None else failure_row(failure),
                why=self._why(),
                cause=None if cause is None else cause_row(cause),
                recovered=recovered_text(self._faults.recovered(), self._loaded),
                stragglers=self._stragglers(),
                slow=slow,
                slow_line=slow_sentence(slow, nodes=self._large()),
                summary=state_ranges(ranks),
                metrics=self._metrics.rows(),
                checkpoints=[checkpoint_row(c) for c in self._checkpoints],
                errors=[error_row(e) for e in errors],
                has_result=self._result is not None,
                logs=LogSummary(
                    kept=len(self._logs), total=self._logs.total, dropped=self._logs.dropped
                ),
                version=self._version,
                diagnosis=self._diagnosis(at),
                staging=[staging_row(f) for f in self._staging.values()],
                warnings=self._notices.listed(),
                phases=phases.rows,
                phase=phases.current,
                first_step_s=phases.first_step_s,
                progress=self._progress.row(self._state in TERMINAL_STATES),
            )

    def _ended_stalled(self) -> bool:
        """Stopped or failed while every rank's steps stalled: its last rate is not current."""
        if self._state not in ("Stopped", "Failed") or self._end_t is None:
            return False
        return self._pace.all_stalled(self._end_t)
