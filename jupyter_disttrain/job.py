"""``Job``: the handle a user holds for a running or finished distributed job.

The plain-Python API under the magics and the command line:
:func:`submit` starts a job on a backend and returns a :class:`Job` that
follows its event stream (through a :class:`~jupyter_disttrain.monitor.JobMonitor`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from . import events as ev
from .backends.base import Backend, BackendError, Submission
from .monitor import JobMonitor
from .payload import Payload
from .remote import JobFailed, JobStopped, decode_result, recreate_exception
from .spec import JobSpec

if TYPE_CHECKING:
    from .checkpoints import CheckpointStore

Listener = Callable[[ev.Event], None]

#: Jobs submitted from this process, by name (the kernel's jobs).
_registry: dict[str, Job] = {}
_registry_lock = threading.Lock()


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
    """A distributed job: status, result, logs, metrics and stop.

    Thread-safe: events arrive on a backend thread while the user calls the
    methods from the notebook.
    """

    def __init__(self, spec: JobSpec, backend: Backend, monitor: JobMonitor | None = None) -> None:
        self.spec = spec
        self.name = spec.name
        self.backend = backend
        self.monitor = monitor or JobMonitor(
            spec.name, backend.name, spec.world_size, nodes=spec.nodes, nproc=spec.nproc
        )
        self.submission: Submission | None = None
        self.created = time.time()
        self._cond = threading.Condition()
        self._state: str = "Pending"
        self._reason = ""
        self._result: ev.Event | None = None
        self._errors: list[ev.Event] = []
        self._listeners: list[Listener] = []

    # -- events --------------------------------------------------------------
    def add_listener(self, listener: Listener) -> None:
        """Call ``listener(event)`` for every later event (from a backend thread)."""
        self._listeners.append(listener)

    def feed(self, event: ev.Event) -> None:
        """Take one event from the backend."""
        self.monitor.feed(event)
        with self._cond:
            if event.kind == "job":
                self._state = str(event.get("state"))
                self._reason = str(event.get("message") or event.get("reason") or "")
            elif event.kind == "result" and event.rank in (0, None):
                self._result = event
            elif event.kind == "error":
                self._errors.append(event)
            self._cond.notify_all()
        for listener in list(self._listeners):
            try:
                listener(event)
            except Exception:  # a broken display must not break the job
                pass

    # -- user API ------------------------------------------------------------
    def status(self) -> str:
        """Pending, Running, Restarting, Succeeded, Failed or Stopped."""
        with self._cond:
            return self._state

    @property
    def done(self) -> bool:
        """True once the job reached a terminal state."""
        return self.status() in ev.TERMINAL_STATES

    @property
    def reason(self) -> str:
        """Why the job is in its current state (empty while it runs normally)."""
        with self._cond:
            return self._reason

    def wait(self, timeout: float | None = None) -> str:
        """Block until the job ends; return its final state.

        Raises :class:`TimeoutError` if it has not ended after ``timeout`` s.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while self._state not in ev.TERMINAL_STATES:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise TimeoutError(f"job {self.name} still {self._state} after {timeout:g} s")
                self._cond.wait(0.2 if left is None else min(left, 0.2))
            return self._state

    def result(self, timeout: float | None = None) -> Any:
        """Rank 0's value of the cell's last expression.

        Waits for the job. If a rank raised, re-raises the first failing
        rank's exception (same type where possible) with its rank and remote
        traceback in the message; :class:`JobFailed` when the job failed
        otherwise, :class:`JobStopped` when it was stopped.
        """
        state = self.wait(timeout)
        with self._cond:
            errors = sorted(self._errors, key=lambda e: e.t)
            result, reason = self._result, self._reason
        if state == "Succeeded":
            return None if result is None else decode_result(result.fields)
        if errors:
            first = errors[0]
            raise recreate_exception(first.fields, first.rank)
        if state == "Stopped":
            raise JobStopped(f"job {self.name} was stopped: {reason}")
        raise JobFailed(f"job {self.name} failed: {reason}")

    def errors(self) -> list[dict[str, Any]]:
        """Every error reported by a rank: rank, type, message, traceback."""
        with self._cond:
            return [{"rank": e.rank, **e.fields} for e in sorted(self._errors, key=lambda e: e.t)]

    def logs(self, rank: int | None = None, tail: int | None = None) -> str:
        """What the ranks printed (one rank, or all prefixed with their rank)."""
        return self.backend.logs(self.name, rank=rank, tail=tail)

    def metrics(self) -> MetricsTable:
        """Every reported metric as a table (see :class:`MetricsTable`)."""
        return MetricsTable(self.monitor.metrics_table())

    def checkpoints(self) -> CheckpointStore:
        """The job's checkpoint directory as a :class:`~.checkpoints.CheckpointStore`."""
        from .checkpoints import CheckpointStore, job_dir_uri

        return CheckpointStore(job_dir_uri(self))

    def stop(self, wait: bool = True, timeout: float = 30.0) -> str:
        """Stop the job; every process of it ends. Returns the final state."""
        if self.submission is not None:
            self.submission.stop("stopped by user")
        else:
            self.backend.stop(self.name)
        if wait and self.submission is not None:
            self.submission.join(timeout)
        return self.status()

    def __repr__(self) -> str:
        extra = f" ({self._reason})" if self._reason and self.done else ""
        return (
            f"<Job {self.name}: {self.status()}{extra}, {self.spec.nodes} node(s) x "
            f"{self.spec.nproc} proc, backend {self.backend.name}>"
        )


def submit(
    spec: JobSpec,
    payload: Payload,
    backend: Backend,
    listeners: Iterable[Listener] = (),
) -> Job:
    """Start ``spec`` on ``backend`` and return its :class:`Job` (registered by name)."""
    job = Job(spec, backend)
    for listener in listeners:
        job.add_listener(listener)
    job.submission = backend.submit(backend.plan(spec, payload), job.feed)
    with _registry_lock:
        _registry[spec.name] = job
    return job


def attach(name: str, backend: Backend, listeners: Iterable[Listener] = ()) -> Job:
    """Follow an existing job of ``backend`` from the start of its event stream."""
    attach_to = getattr(backend, "attach", None)
    if attach_to is None:
        raise BackendError(f"the {backend.name} backend cannot re-attach to jobs")
    holder: list[Job] = []
    pending: list[ev.Event] = []
    lock = threading.Lock()

    def sink(event: ev.Event) -> None:  # events may arrive before the Job exists
        with lock:
            if not holder:
                pending.append(event)
                return
        holder[0].feed(event)

    spec, submission = attach_to(name, sink)
    job = Job(spec, backend)
    for listener in listeners:
        job.add_listener(listener)
    job.submission = submission
    with lock:
        for event in pending:
            job.feed(event)
        holder.append(job)
    with _registry_lock:
        _registry[name] = job
    return job


def registered() -> dict[str, Job]:
    """Jobs submitted from this process, by name."""
    with _registry_lock:
        return dict(_registry)


def stop_all(timeout: float = 30.0) -> None:
    """Stop every running job of this process (kernel shutdown)."""
    for job in registered().values():
        if not job.done and job.submission is not None:
            job.submission.stop("owner shutting down")
    for job in registered().values():
        if job.submission is not None:
            job.submission.join(timeout)
