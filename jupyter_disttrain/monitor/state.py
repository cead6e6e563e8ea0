"""JobBook: the facts of one job and how each event changes them (pure, no lock).

:meth:`JobBook.apply` hands every event to the part that owns its fact. The
book itself owns the job and rank state machines: the rank rows, the job
state and what the backend reported, attempts, times, the version, the first
copies seen, staging, checkpoints, result. The parts, each with its own
fields, asked through methods:

- :class:`~.failures.FailureBook`: failures, errors, the agents' logged exits,
  workers' pids, recovered causes (it reads rank states the rows own, passed in);
- :class:`~.pace.Pace`: per-rank recent steps, rates, stalls, the frontier;
- :class:`~.stacks.StackBook`: stacks by request and the newest output time (hangs);
- :class:`~.comms.CommsReader`: the NCCL / c10d / gloo reading and unresolved names;
- :class:`~.metrics.MetricStore` (series), :class:`~jupyter_disttrain.logbuffer.LogBuffer`
  (log lines), :class:`~.phases.PhaseLog` (start-up phases),
  :class:`~.usage.ProgressTracker` (rank 0's progress bar), :class:`~.paused.PauseBook`
  (debugger pauses), :class:`~.notices.Notices` (warnings).

What the views read from a book (the diagnosis, the hang, the snapshot) is
derived in :mod:`.readings`; :class:`~.core.JobMonitor` shares one book
between the thread that feeds it and the threads that read it.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence
from typing import Any, Final, Unpack, cast

from ..events import (
    JOB_STATES,
    TERMINAL_STATES,
    Event,
    FirstCopies,
    JobState,
    StagingFields,
)
from ..logbuffer import JOB_RANK, LogBuffer
from .cause import CLASSES, Cause, classify_error, classify_exit, error_reason
from .comms import CommsReader
from .failures import FailureBook
from .metrics import MetricStore
from .notices import Notices
from .pace import Pace
from .paused import PauseBook
from .phases import PhaseLog
from .records import (
    LOG_LIMIT,
    RANK_STATES,
    BookSettings,
    Checkpoint,
    ErrorInfo,
    Failure,
    RankState,
    as_int,
    as_str,
)
from .stacks import StackBook
from .usage import ProgressTracker, apply_resources, clear_resources

# --------------------------------------------------------------------------- the book


class JobBook:
    """The facts of one job and the handlers that update them from events.

    Not thread-safe: its owner serialises :meth:`apply` and every read (the
    :class:`~.core.JobMonitor` holds ``lock``, which the metric store shares).
    Fields without a leading underscore are read by :mod:`.readings`; only the
    handlers here write them.
    """

    def __init__(
        self,
        name: str,
        backend: str,
        world_size: int,
        nodes: int = 1,
        nproc: int = 1,
        *,
        lock: threading.RLock | None = None,
        **settings: Unpack[BookSettings],
    ) -> None:
        if world_size < 1 or nodes < 1 or nproc < 1:
            raise ValueError("world_size, nodes and nproc must be positive")
        self.name = name
        self.backend = backend
        self.nodes = nodes
        self.nproc = nproc
        self.straggler_steps = settings.get("straggler_steps", 10)
        self.straggler_fraction = settings.get("straggler_fraction", 0.2)
        self.lock = lock if lock is not None else threading.RLock()
        self.world_size = world_size
        self.rows: dict[int, RankState] = {}
        for rank in range(world_size):
            self._row(rank)
        self.state: JobState = "Pending"
        self.explicit_terminal = False
        # restarts the launcher makes after a failure (torchrun's --max-restarts): a failure
        # while some are left reads Restarting, not Failed, until the restart (or the end)
        self.max_restarts = settings.get("max_restarts", 0)
        self.restart_due = False
        self.reason = ""
        self.message = ""
        self.dist_backend: str | None = None
        self.attempt = 0
        self.first_t: float | None = None
        self.started_t: float | None = None
        self.end_t: float | None = None
        self.version = 0
        # per rank: attempt of the last hello; the ranks' steps and rates
        self._hello_attempt: dict[int, int] = {}
        self._restart_counted: set[int] = set()
        self.pace = Pace(settings.get("rate_window", 30.0))
        self.faults = FailureBook()  # failures, errors, logged exits, recovered causes
        self.checkpoints: list[Checkpoint] = []
        self.loaded: int | None = None  # the step of the checkpoint rank 0 last loaded
        self.result: Event | None = None
        self.logs = LogBuffer(settings.get("log_limit", LOG_LIMIT))
        self.metrics = MetricStore(self.lock)
        # what the backend itself last said (the end is final only once it says so), and
        # whether it holds the job (waiting or restarting, not yet run since): see _derive
        self.reported: JobState = "Pending"
        self.reported_why = ("", "")  # its reason and message then
        self.held = False
        # every log line goes through the NCCL / c10d / gloo parser as it arrives
        self.comms = CommsReader()
        # stacks by request (newest last), and when a rank last wrote anything
        self.stacks = StackBook()
        self._copies = FirstCopies(_DEDUPED, MAX_SEEN)
        # --data sources by (source, pod), and warnings the workers or the backend printed
        self.staging: dict[tuple[str, str], StagingFields] = {}
        self.notices = Notices()
        # the start-up phases the backend observes, and the events their timeline needs
        self.phases = tuple(settings.get("phases", ()))
        self.phase_log = PhaseLog()
        self.progress = ProgressTracker()  # rank 0's steps of a known total
        self.pauses = PauseBook()  # ranks stopped in the debugger

    # ------------------------------------------------------------------ applying

    def apply(self, ev: Event) -> None:
        """Apply one event (any kind; unknown kinds only count as activity)."""
        if ev.kind == "metric":
            self._on_metrics((ev,))
            return
        if not self._copies.first(ev):  # one copy of a worker's line (rank 0 relays others')
            return
        self.version += 1
        self.phase_log.add(ev)
        if self.first_t is None:
            self.first_t = ev.t
        rank = ev.rank
        row = self._row(rank) if rank is not None and rank >= 0 else None
        if row is not None and ev.kind in _WORKER_SPEAKS:
            row.last_heard = ev.t if row.last_heard is None else max(row.last_heard, ev.t)
        handler = _HANDLERS.get(ev.kind)
        if handler is not None:
            handler(self, ev, row)
        if row is not None and self.pauses.active:
            self.pauses.note(row)

    def apply_many(self, events: Iterable[Event]) -> None:
        """Apply ``events`` in order, as :meth:`apply` would one by one (each run of
        ``metric`` events in one pass: rank 0 relays hundreds a line)."""
        run: list[Event] = []
        for ev in events:
            if ev.kind == "metric":
                run.append(ev)
                continue
            if run:
                self._on_metrics(run)
                run = []
            self.apply(ev)
        if run:
            self._on_metrics(run)

    def _on_metrics(self, run: Sequence[Event]) -> None:
        """Apply a run of ``metric`` events (their first copies) in order."""
        fresh = self._copies.firsts(run)
        if not fresh:
            return
        self.version += len(fresh)
        self.phase_log.add(min(fresh, key=_time))
        if self.first_t is None:
            self.first_t = fresh[0].t
        self.stacks.wrote(max(ev.t for ev in fresh))
        row_of, track = self._row, self.pace.track
        note = self.pauses.note if self.pauses.active else None
        points: list[tuple[int, int, float, Any]] = []
        for ev in fresh:
            rank, t = ev.rank, ev.t
            if rank is None or rank < 0:
                continue
            row = row_of(rank)
            row.last_heard = t if row.last_heard is None else max(row.last_heard, t)
            step = as_int(ev.fields.get("step"))
            if step is not None:
                if row.state == "Pending":
                    row.state = "Running"
                    self.held = False  # the first sign of this rank: it runs
                    if self.state == "Pending":
                        self._derive("Running", t)
                row.step_rate = track(rank, step, t)
                row.step = step
                points.append((rank, step, t, ev.fields.get("values")))
            if note is not None:
                note(row)
        self.metrics.add_many(points)

    def _on_job(self, ev: Event, row: RankState | None) -> None:
        f = ev.job()
        self.reason = as_str(f.get("reason"))
        self.message = as_str(f.get("message"))
        self.reported_why = (self.reason, self.message)
        reported = f.get("state")
        if reported == "Running" and self.state == "Restarting" and (self.held or self.restart_due):
            # its pods run again (restarted in place) before a rank of the new attempt did;
            # the job's own report may come before the backend's restart (another stream)
            self.reported = "Running"
            return
        if reported not in JOB_STATES:
            return
        state = cast(JobState, reported)
        self.reported = state
        self.restart_due = self.restart_due and state not in TERMINAL_STATES
        self.held = state in _HOLDS
        self.explicit_terminal = False
        self._set_state(state, ev.t)
        self.explicit_terminal = state in TERMINAL_STATES
        if state == "Stopped":
            self._forget_consequences()
        if state in ("Stopped", "Failed"):
            for other in self.rows.values():
                if other.state in ("Pending", "Running", "Restarting"):
                    other.state = "Stopped"
        if state == "Failed":
            self._settle()

    def _on_restart(self, ev: Event, row: RankState | None) -> None:
        f = ev.restart()
        attempt = as_int(f.get("attempt"))
        self.faults.restart(self.rank_states(), self.attempt, self._attempt_failed)
        self.restart_due = False
        self.attempt = max(self.attempt + 1, attempt or 0)
        reason = as_str(f.get("reason"))
        if not self.explicit_terminal:
            self.reason = reason
            self.message = ""
            self.held = True  # the backend's own report: its ranks start again
            self._set_state("Restarting", ev.t)
        for other in self.rows.values():
            other.restarts += 1
            other.state = "Restarting"
            other.step = other.step_rate = None  # the new processes report afresh
            clear_resources(other)
        self.pace.restart()
        self._restart_counted.clear()
        self.progress.clear()

    def _on_hello(self, ev: Event, row: RankState | None) -> None:
        f = ev.hello()
        if row is None:
            return
        if self._hello_attempt.get(row.rank) == self.attempt:
            # A second hello in the same attempt: this rank was restarted on its own.
            if row.rank not in self._restart_counted:
                row.restarts += 1
            row.step = row.step_rate = None
        self._restart_counted.discard(row.rank)
        self._hello_attempt[row.rank] = self.attempt
        local_rank = as_int(f.get("local_rank"))
        node = as_int(f.get("node_rank"))
        pid = as_int(f.get("pid"))
        if local_rank is not None:
            row.local_rank = local_rank
        if node is not None:
            row.node = node
        if pid is not None:
            row.pid = pid
            self.faults.pid(pid, row.rank, self.attempt)
        launched = as_int(f.get("launched_pid"))
        if launched is not None:
            self.faults.pid(launched, row.rank, self.attempt)
        row.host = as_str(f.get("host")) or row.host
        versions = f.get("versions")
        if isinstance(versions, dict):
            row.versions = dict(versions)
        backend = f.get("backend")
        if isinstance(backend, str) and backend:
            self.dist_backend = backend
        world = as_int(f.get("world_size"))
        if world is not None and world > 0 and world != self.world_size:
            self._resize(world)
        self.pace.forget(row.rank)
        if self.explicit_terminal:
            return  # the backend said the job is over; keep its verdict on the rows
        if self.held and self.reported == "Running":  # the restart is over: the job's word
            self.reason, self.message = self.reported_why
        self.held = False  # a rank of the current attempt runs: the wait is over
        row.state = "Running"
        row.exit_code = None
        row.reason = ""
        # A late hello from a healthy rank does not hide another rank's failure.
        if self.state != "Failed" or all(r.state != "Failed" for r in self.rows.values()):
            self._derive("Running", ev.t)

    def _on_checkpoint(self, ev: Event, row: RankState | None) -> None:
        f = ev.checkpoint()
        step = as_int(f.get("step"))
        self.checkpoints.append(
            Checkpoint(
                step if step is not None else -1,
                as_str(f.get("uri")),
                as_int(f.get("bytes")),
                ev.rank,
                ev.t,
            )
        )

    def _on_loaded(self, ev: Event, row: RankState | None) -> None:
        self.loaded = as_int(ev.get("step"))

    def _on_result(self, ev: Event, row: RankState | None) -> None:
        if self.result is None or ev.rank == 0 or self.result.rank != 0:
            self.result = Event(ev.kind, ev.rank, ev.t, dict(ev.fields))

    def _on_error(self, ev: Event, row: RankState | None) -> None:
        f = ev.error()
        info = ErrorInfo(
            ev.rank,
            ev.t,
            as_str(f.get("type")) or "Error",
            as_str(f.get("message")),
            as_str(f.get("traceback")),
            self.attempt,
        )
        self.faults.error(info, ev)
        if row is None:
            return
        reason = error_reason(info.type, info.message)
        if self.explicit_terminal and row.state == "Stopped":
            return
        # a session's rank whose cell raised lives on (its cell already ended): Raised
        row.state = "Raised" if row.state == "Raised" else "Failed"
        row.reason = reason
        self._fail(row, ev.t, reason, classify_error(info.type, info.message))

    def _on_done(self, ev: Event, row: RankState | None) -> None:
        if row is None:
            return
        row.state = "Succeeded"
        world = range(self.world_size)
        if all(r in self.rows and self.rows[r].state == "Succeeded" for r in world):
            self._derive("Succeeded", ev.t)

    def _on_rank(self, ev: Event, row: RankState | None) -> None:
        f = ev.rank_fact()
        if row is None:
            return
        state = as_str(f.get("state"))
        code = as_int(f.get("exit_code"))
        reason = as_str(f.get("reason"))
        node = as_int(f.get("node"))
        if node is not None:
            row.node = node
        row.host = as_str(f.get("host")) or row.host
        row.pod = as_str(f.get("pod")) or row.pod
        if code is not None:
            row.exit_code = code
        if self.explicit_terminal and row.state == "Stopped":
            return  # teardown of a job that is already over: not a failure
        if state == "Failed" or (code is not None and code != 0):
            why = reason or "failed"
            if code is not None:
                why = f"{reason} (exit code {code})" if reason else f"exit code {code}"
            category = classify_exit(code, reason)
            if row.state not in ("Failed", "Stopped") or not row.reason:
                row.reason = why
            row.state = "Failed"
            self._fail(row, ev.t, why, category)
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
        row = self.rows.get(rank)
        if row is None:
            row = self.rows[rank] = RankState(rank, rank // self.nproc, rank % self.nproc)
        return row

    def _resize(self, world: int) -> None:
        self.world_size = world
        for rank in range(world):
            self._row(rank)
        for rank in [r for r, row in self.rows.items() if r >= world]:
            row = self.rows[rank]
            if row.state == "Pending" and row.last_heard is None:
                del self.rows[rank]

    def _fail(self, row: RankState, t: float, reason: str, category: str) -> None:
        if self.held and category in _NOT_OWN:
            row.state = "Stopped"  # ended by what the backend does while it holds the job
            return
        self.faults.fail(Failure(t, row.rank, reason, self.attempt, category))
        if self.attempt < self.max_restarts and not self.explicit_terminal and not self.held:
            self.restart_due = True  # the launcher restarts the ranks: the job goes on
            self._derive("Restarting", t)
        else:
            self._derive("Failed", t)
        self._settle()

    @property
    def _attempt_failed(self) -> bool:
        """Whether the current attempt failed: the job Failed, or it fails over to a restart
        (see :meth:`_fail`); its cause then weighs the launcher's exits."""
        return self.state == "Failed" or (self.restart_due and self.state == "Restarting")

    def rank_states(self) -> dict[int, str]:
        return {r: row.state for r, row in self.rows.items()}

    def cause(self) -> Cause | None:
        """The root cause of the job's failures (see :mod:`.cause`).

        While the job runs, waits or restarts: the current attempt's. Once it
        failed (it did not recover): chosen over every attempt, so a last
        attempt of signals and lost peers is explained by the rank that raised.
        """
        return self.faults.cause(self.rank_states(), self.attempt, self._attempt_failed)

    def _settle(self) -> None:
        """Failed: the ranks whose failure is as bad as the cause's; Stopped: its consequences.

        A job that has not failed (the backend holds it) fails no rank for what
        was done to it: a rank ended by a signal or a lost peer reads Stopped.
        """
        cause = self.cause()
        if cause is None:
            return
        worst = CLASSES.index(cause.category)
        if not self._attempt_failed:
            worst = min(worst, CLASSES.index("exited"))
        best = self.faults.worst(self.attempt, self._attempt_failed)
        for rank, worst_of_rank in best.items():
            row = self.rows.get(rank)
            if row is not None and row.state in ("Failed", "Stopped"):
                row.state = "Failed" if worst_of_rank <= worst else "Stopped"
        row = self.rows.get(cause.rank)
        own = CLASSES.index(cause.category) <= worst
        if row is not None and row.state in ("Failed", "Stopped") and own:
            row.state = "Failed"
            row.reason = row.reason or cause.reason

    def _forget_consequences(self) -> None:
        """A stop: what the stop itself caused (signals, lost peers) is not a failure."""
        failed = self.faults.stopped(self.attempt)
        for row in self.rows.values():
            if row.state == "Failed" and row.rank not in failed:
                row.state = "Stopped"

    def _derive(self, state: JobState, t: float) -> None:
        """A state inferred from worker facts (hello, metric, error, exit, done).

        It never overrides the backend's own report of a terminal state, nor of
        a wait or a restart (Pending, Restarting) no rank of the job has run in
        since: what ends a rank then (a preemption's SIGTERM, a restart's
        teardown) is the backend's doing, and the backend says what follows.
        """
        if not self.explicit_terminal and not self.held and state != self.state:
            self._set_state(state, t)

    def _set_state(self, state: JobState, t: float) -> None:
        self.state = state
        if state in TERMINAL_STATES:
            self.end_t = t
        else:
            self.end_t = None
        if state == "Running" and self.started_t is None:
            self.started_t = t

    def _on_stacks(self, ev: Event, row: RankState | None) -> None:
        f = ev.stacks()
        request = as_str(f.get("request"))
        if row is None or not request:
            return
        self.stacks.add(request, row.rank, f, ev.t)

    def _on_staging(self, ev: Event, row: RankState | None) -> None:
        f = ev.staging()
        key = (as_str(f.get("src")), as_str(f.get("host")))
        self.staging[key] = f

    def _on_resources(self, ev: Event, row: RankState | None) -> None:
        if row is not None:  # quiet: neither "heard" nor output (hang reading)
            apply_resources(row, ev.resources())

    def _on_progress(self, ev: Event, row: RankState | None) -> None:
        f = ev.progress()
        self.stacks.wrote(ev.t)
        self.progress.add(ev.t, f.get("step"), f.get("total"))

    def _on_cell(self, ev: Event, row: RankState | None) -> None:
        """A session cell's end on a rank: the rank lives on, ready for the next cell.

        Ready when the cell ended without an error there; Raised when it raised
        (the rank's ``error`` may come before or after this end line).
        """
        if row is None or ev.get("phase") != "end":
            return
        if ev.get("status") == "error":
            if row.state in ("Pending", "Running", "Failed", "Ready"):
                row.state = "Raised"
        elif row.state in ("Pending", "Running", "Raised"):
            row.state, row.reason = "Ready", ""

    def _on_paused(self, ev: Event, row: RankState | None) -> None:
        self.stacks.wrote(ev.t)
        if row is not None:
            self.pauses.pause(ev, row, self.rows)

    def _on_resumed(self, ev: Event, row: RankState | None) -> None:
        self.stacks.wrote(ev.t)
        if row is not None:
            self.pauses.resume(row, self.rows)

    def _on_log(self, ev: Event, row: RankState | None) -> None:
        f = ev.log()
        if ev.rank is not None and ev.rank >= 0:
            self.stacks.wrote(ev.t)
        rank = ev.rank if ev.rank is not None and ev.rank >= 0 else JOB_RANK
        text = as_str(f.get("text"))
        self.notices.feed(ev.rank, text, f.get("rejected"))
        source = as_str(f.get("source"))
        if rank == JOB_RANK and source.startswith("agent-"):
            if self.faults.agent_line(source, text, ev.t, self.attempt):
                self._settle()
        self.logs.append(rank, ev.t, text)
        self.comms.feed(text, rank if rank >= 0 else None)


_WORKER_SPEAKS: Final = frozenset(
    {"hello", "metric", "checkpoint", "result", "error", "done", "log", "progress"}
) | {"paused", "resumed"}
_HANDLERS: Final = {
    "job": JobBook._on_job,
    "restart": JobBook._on_restart,
    "rank": JobBook._on_rank,
    "hello": JobBook._on_hello,
    "checkpoint": JobBook._on_checkpoint,
    "loaded": JobBook._on_loaded,
    "result": JobBook._on_result,
    "error": JobBook._on_error,
    "done": JobBook._on_done,
    "log": JobBook._on_log,
    "stacks": JobBook._on_stacks,
    "staging": JobBook._on_staging,
    "resources": JobBook._on_resources,
    "progress": JobBook._on_progress,
    "cell": JobBook._on_cell,
    "paused": JobBook._on_paused,
    "resumed": JobBook._on_resumed,
}
#: The backend's reports that hold the job: no worker fact changes its state until a rank runs.
_HOLDS: Final = frozenset({"Pending", "Restarting"})
#: Failure classes that are not a rank's own doing (see :mod:`.cause`).
_NOT_OWN: Final = frozenset({"killed", "consequence"})
#: Worker protocol kinds that arrive once per line written (a copy seen again is dropped).
_DEDUPED: Final = frozenset({"hello", "metric", "checkpoint", "result", "error", "done"})
#: Protocol lines remembered for that (the oldest are forgotten first).
MAX_SEEN: Final = 200_000


def _time(event: Event) -> float:
    return event.t
