"""``Job``: the handle a user holds for a running or finished distributed job.

A :class:`Job` is a handle over its :class:`~jupyter_disttrain.monitor.JobMonitor`,
which owns the job's state, result, errors and diagnosis; the
:mod:`~jupyter_disttrain.service` creates jobs (submit, attach) and keeps
this process's jobs by name.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from . import events as ev
from .backends import optional
from .backends.base import Backend, BackendError, EventFeed, JobRecord, Plan, Submission
from .checkpoints.store import CheckpointError, CheckpointStore, reported_dir
from .debugging import COMMAND_WAIT, Answer, RankDebugger, cast
from .monitor import LOG_LIMIT, JobMonitor, Where, user_traceback
from .monitor.paused import PausedRank
from .results import JobFailed, JobStopped, decode_result, recreate_exception
from .runtime.control import BREAKS, PAUSE, breaks_body, ranks_body
from .spec import JobSpec

Listener = Callable[[ev.Event], None]
#: Seconds :meth:`Job.wait` gives each closer (a sink writing the job's end elsewhere).
CLOSE_WAIT = 30.0


class MetricsTable(list[dict[str, Any]]):
    """Rows of reported metrics (``rank``, ``step``, ``t`` and each metric name).

    A list of dicts; ``to_pandas()`` gives a DataFrame where pandas is
    installed, ``column(name)`` one column as a list.
    """

    @property
    def columns(self) -> list[str]:
        """Column names in first-seen order."""
        seen: dict[str, None] = {}
        for row in self:
            for key in row:
                seen.setdefault(key, None)
        return list(seen)

    def column(self, name: str) -> list[Any]:
        """Values of one column (None where a row lacks it)."""
        return [row.get(name) for row in self]

    def to_pandas(self) -> Any:
        """The table as a ``pandas.DataFrame``."""
        import pandas as pd

        return pd.DataFrame(list(self), columns=self.columns)

    def __repr__(self) -> str:
        if not self:
            return "MetricsTable(no metrics reported)"
        cols = self.columns
        shown = list(self[:5]) + (list(self[-5:]) if len(self) > 10 else list(self[5:]))
        lines = ["  ".join(f"{c:>10}" for c in cols)]
        for i, row in enumerate(shown):
            if len(self) > 10 and i == 5:
                lines.append(f"{'...':>10}")
            lines.append("  ".join(f"{_fmt(row.get(c)):>10}" for c in cols))
        lines.append(f"[{len(self)} rows x {len(cols)} columns]")
        return "\n".join(lines)


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.6g}" if abs(value) < 1e9 else f"{value:.3f}"
    return "" if value is None else str(value)


class Job:
    """A distributed job: status, result, logs, metrics, diagnosis and stop.

    Thread-safe: events arrive on a backend thread while the user calls the
    methods from the notebook. ``plan`` is the plan that was submitted (None
    for a job attached to after the fact).
    """

    def __init__(
        self,
        spec: JobSpec,
        backend: Backend,
        monitor: JobMonitor | None = None,
        *,
        plan: Plan | None = None,
        log_limit: int = LOG_LIMIT,
    ) -> None:
        self.spec = spec
        self.name = spec.name
        self.backend = backend
        self.plan = plan
        self.monitor = monitor or JobMonitor(
            spec.name,
            backend.name,
            spec.world_size,
            nodes=spec.nodes,
            nproc=spec.nproc,
            phases=backend.capabilities.phases,
            max_restarts=spec.max_restarts,
            log_limit=log_limit,
        )
        self.submission: Submission | None = None
        self._listeners: list[Listener] = []
        self._closers: list[Callable[[float], object]] = []
        #: What a backend reports this job's events to (:meth:`feed`, :meth:`feed_many`).
        self.sink = EventFeed(self.feed_many)

    # -- events --------------------------------------------------------------
    def add_listener(self, listener: Listener) -> None:
        """Call ``listener(event)`` for every later event (from a backend thread)."""
        self._listeners.append(listener)

    def add_closer(self, close: Callable[[float], object]) -> None:
        """Call ``close(seconds)`` once the job ended, from the first :meth:`wait` after.

        For listeners that write elsewhere on their own thread (TensorBoard,
        MLflow): ``close`` waits up to ``seconds`` for them to finish, so a
        job waited for is written everywhere.
        """
        self._closers.append(close)

    def feed(self, event: ev.Event) -> None:
        """Take one event from the backend."""
        self.feed_many((event,))

    def feed_many(self, events: Sequence[ev.Event]) -> None:
        """Take a run of events from the backend: the monitor applies them all, then each
        listener is called with each, in order."""
        self.monitor.feed_many(events)
        for listener in list(self._listeners):
            for event in events:
                try:
                    listener(event)
                except Exception:  # a broken display must not break the job
                    pass

    # -- user API ------------------------------------------------------------
    def status(self) -> str:
        """Pending, Running, Restarting, Succeeded, Failed or Stopped (as the backend said)."""
        return self.monitor.reported_state

    @property
    def done(self) -> bool:
        """True once the job reached a terminal state."""
        return self.monitor.ended

    @property
    def reason(self) -> str:
        """Why the job is in its state: for a failure its root cause (empty while it runs)."""
        return self.monitor.reason

    def wait(self, timeout: float | None = None) -> str:
        """Block until the job ends; return its final state.

        Raises :class:`TimeoutError` if it has not ended after ``timeout`` s.
        Once it ended, the first call waits (up to :data:`CLOSE_WAIT` s each)
        for the closers (see :meth:`add_closer`).
        """
        state = self.monitor.wait(timeout)
        closers, self._closers = self._closers, []  # waited for once (a stuck one once only)
        for close in closers:
            close(CLOSE_WAIT)
        return state

    def result(self, timeout: float | None = None) -> Any:
        """Rank 0's value of the cell's last expression.

        Waits for the job. If a rank raised, re-raises the exception of the
        rank that caused the failure (:meth:`JobMonitor.cause`; same type where
        possible) with its rank and remote traceback in the message;
        :class:`JobFailed` when the job failed otherwise, :class:`JobStopped` when it was stopped.
        """
        state = self.wait(timeout)
        result = self.monitor.result()
        if state == "Succeeded":
            return None if result is None else decode_result(result.fields)
        first = self.monitor.cause_error()
        if first is None and state == "Failed" and self.monitor.cause() is None:
            errors = self.monitor.error_events()  # no cause chosen: the earliest error
            first = errors[0] if errors else None
        if first is not None:  # its traceback from the cell on
            trace = user_traceback(str(first.get("traceback") or ""))
            fields = {**first.fields, "traceback": trace}
            raise recreate_exception(fields, first.rank)
        if state == "Stopped":
            raise JobStopped(f"job {self.name} was stopped: {self.reason}")
        raise JobFailed(f"job {self.name} failed: {self.reason}")

    def errors(self) -> list[dict[str, Any]]:
        """Every error reported by a rank: rank, type, message, traceback."""
        return [{"rank": e.rank, **e.fields} for e in self.monitor.error_events()]

    def diagnosis(self) -> str | None:
        """The job's current one-sentence reading (communication, hang or failure), or None."""
        return self.monitor.diagnosis()

    def where(self, timeout: float | None = None) -> Where:
        """Where every rank is: its threads' stacks, grouped by identical stacks.

        A running job whose backend can ask (``optional.STACKS``)
        is asked now, and this waits up to ``timeout`` s (default 10, or 90 where
        workers are remote: their machine's agent passes the request on within its sync
        period) for every rank that is still up; otherwise the newest stacks the
        job sent (at a hang) are returned. Its text shows the cell's and the user's
        own frames with their source lines, the rest folded (``text(library=True)``). Raises
        :class:`~.backends.base.BackendError` when there are none.
        """
        if timeout is None:
            timeout = 90.0 if self.backend.capabilities.remote_workers else 10.0
        if optional.STACKS.has(self.backend) and not self.done:
            request = optional.STACKS.of(self.backend).request_stacks(self.name)
            found = self.monitor.wait_for_stacks(request, timeout)
            if found is not None:
                return self._with_source(found)
            raise BackendError(
                f"no rank of job {self.name} answered within {timeout:g} s (state "
                f"{self.status()}); its ranks may not have started yet"
            )
        found = self.monitor.where()
        if found is None:
            raise BackendError(
                f"job {self.name} has sent no stacks: on the {self.backend.name} backend its "
                "ranks send them when they hang (--hang-after SECONDS)"
                if not self.done
                else f"job {self.name} has ended and sent no stacks"
            )
        return self._with_source(found)

    def _with_source(self, found: Where) -> Where:
        """``found`` with the cell's source, so its frames show their lines."""
        return found if self.plan is None else replace(found, cell_source=self.plan.payload.source)

    def logs(self, rank: int | None = None, tail: int | None = None) -> str:
        """What the ranks printed (one rank, or all prefixed with their rank)."""
        return self.backend.logs(self.name, rank=rank, tail=tail)

    def metrics(self) -> MetricsTable:
        """Every reported metric as a table (see :class:`MetricsTable`)."""
        return MetricsTable(self.monitor.metrics_table())

    def checkpoint_dir(self) -> str:
        """Where the job writes checkpoints: its option, where it reported, else the default.

        Raises :class:`~.checkpoints.CheckpointError` when none of those is known.
        """
        if self.spec.checkpoint_dir:
            return self.spec.checkpoint_dir
        found = reported_dir([c.uri for c in self.monitor.checkpoints()])
        if found is None and self.backend.capabilities.checkpoints_on_path:
            spec = self.spec
            found = self.backend.checkpoint_dir(
                JobRecord(
                    spec.name,
                    self.backend.name,
                    self.status(),
                    spec.world_size,
                    spec.nodes,
                    spec.nproc,
                    0.0,
                )
            )
        if found is None:
            raise CheckpointError(
                f"job {self.name} has no checkpoint directory: run it with --checkpoint-dir "
                "PATH_OR_URL"
            )
        return found

    def checkpoints(self) -> CheckpointStore:
        """The job's checkpoint directory as a :class:`~.checkpoints.CheckpointStore`."""
        return CheckpointStore(self.checkpoint_dir())

    def stop(self, wait: bool = True, timeout: float = 30.0) -> str:
        """Stop the job; every process of it ends. Returns the final state."""
        if self.submission is not None:
            self.submission.stop("stopped by user")
        else:
            self.backend.stop(self.name)
        if wait and self.submission is not None:
            self.submission.join(timeout)
        return self.status()

    # -- the debugger ---------------------------------------------------------
    def paused(self) -> list[PausedRank]:
        """The ranks stopped in the debugger now (``rank``, ``file``, ``line``, ``function``)."""
        return self.monitor.paused()

    def pause(
        self, ranks: Sequence[int] | None = None, timeout: float | None = None
    ) -> list[PausedRank]:
        """Pause running ``ranks`` (None: every rank) at their next line of the cell, as at a
        breakpoint; return the paused ranks once every one asked is (or after ``timeout`` s:
        default 10, or 90 where workers are remote and their machine's agent passes it on;
        0: ask and return at once).

        A rank waiting in a collective for a paused peer pauses once the collective
        returns. Raises :class:`~.backends.base.BackendError` when the backend cannot
        pause ranks, the job has ended, a rank is out of range, or no rank paused in time.
        """
        controls = optional.CONTROLS.of(self.backend)  # raises, naming what to do instead
        world = self.spec.world_size
        wanted = set(range(world)) if ranks is None else set(ranks)
        wrong = sorted(r for r in wanted if not 0 <= r < world)
        if wrong:
            raise BackendError(f"rank {wrong[0]}: job {self.name} has ranks 0 to {world - 1}")
        if self.done:
            raise BackendError(f"job {self.name} has ended ({self.status()}): nothing to pause")
        if timeout is None:
            timeout = 90.0 if self.backend.capabilities.remote_workers else 10.0
        controls.send_control(self.name, PAUSE, ranks_body(None if ranks is None else wanted))
        deadline = time.monotonic() + timeout
        while not wanted <= {p.rank for p in self.paused()} and time.monotonic() < deadline:
            if self.done:
                break
            time.sleep(0.05)
        paused = [p for p in self.paused() if p.rank in wanted]
        if not paused and timeout > 0:
            raise BackendError(
                f"no rank of job {self.name} paused within {timeout:g} s (state "
                f"{self.status()}): a rank pauses at its next line of the cell, so one still "
                "starting, ending or in a long call has not reached one"
            )
        return paused

    def set_breakpoints(self, spots: Sequence[Mapping[str, Any]]) -> bool:
        """Give the running cell of every rank breakpoints ``spots`` (``line`` of the worker's
        copy of the cell, ``condition``), replacing its own; a paused rank takes them when it
        runs on. False when the job has ended or its backend cannot reach running ranks."""
        if self.done or not optional.CONTROLS.has(self.backend):
            return False
        optional.CONTROLS.of(self.backend).send_control(self.name, BREAKS, breaks_body(spots))
        return True

    def debug(self, rank: int) -> RankDebugger:
        """The debugger of ``rank`` (paused at ``breakpoint()`` or post-mortem): ``send("p x")``,
        ``cont()``. One handle per rank, kept."""
        debuggers: dict[int, RankDebugger] = self.__dict__.setdefault("_debuggers", {})
        if rank not in debuggers:
            debuggers[rank] = RankDebugger(self, rank)
        return debuggers[rank]

    def cast(self, line: str, timeout: float = COMMAND_WAIT) -> dict[int, Answer]:
        """Send one pdb command to every paused rank at once: ``{rank: answer}``."""
        return cast({p.rank: self.debug(p.rank) for p in self.paused()}, line, timeout)

    def __repr__(self) -> str:
        reason = self.reason
        extra = f" ({reason})" if reason and self.done else ""
        return (
            f"<Job {self.name}: {self.status()}{extra}, {self.spec.nodes} node(s) x "
            f"{self.spec.nproc} proc, backend {self.backend.name}>"
        )
