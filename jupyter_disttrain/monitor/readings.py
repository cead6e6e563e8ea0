"""What a job's facts read as: its shown state, the one-line why, the diagnosis, the
hang, slow ranks, stragglers and the snapshot every view renders.

Pure functions of a :class:`~.state.JobBook` (and the time ``now``, default
:func:`time.time`); the caller holds the book's lock (:class:`~.core.JobMonitor`
does). They combine the parts' answers and change nothing.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Collection

from ..events import TERMINAL_STATES
from ..runtime.numbers import finite_or_none
from .cause import Cause, cell_line, comms_names_cause, recovered_text
from .hung import hung_rows
from .network import failed_sentence, partition_of, partition_sentence, place
from .raised import raised_sentence, shown_end
from .records import Failure, LogSummary, SlowRow, Snapshot, as_str, now_or_clock
from .rows import (
    cause_row,
    checkpoint_row,
    error_row,
    failure_row,
    rank_row,
    staging_row,
)
from .scale import slow_ranks, slow_sentence, state_ranges, summarised
from .state import JobBook
from .where import Where, where_from

#: The metric a rank may report as its own seconds of work per step (see :func:`slow_rows`).
STEP_TIME = "step_time"
#: Rank states of a rank that will send no more stacks.
_ENDED_RANK = frozenset({"Succeeded", "Failed", "Stopped", "Exited"})


def display_state(book: JobBook, now: float | None = None) -> str:
    """The state to show: the job state, ``Hung`` while a detected hang lasts, ``Paused``
    in the debugger, ``Raised`` for a session cell that raised (see :mod:`.raised`)."""
    if book.state == "Running" and book.pauses.ranks(book.rows):
        return "Paused"
    if book.state == "Running" and hang_where(book, now) is not None:
        return "Hung"
    return shown_end(book.state, book.rows)  # Raised: a session cell raised


def why(book: JobBook) -> str:
    """Why the job is in its state: Failed, the root cause and its consequences;
    Restarting, the cause it restarts after; otherwise what the backend said."""
    cause = book.cause()
    said = book.message or book.reason
    if book.state == "Failed":
        return cause_line(book, cause) if cause is not None else said
    if book.restart_due and book.state == "Restarting" and cause is not None:
        return f"restarting after {cause_line(book, cause)}"  # the launcher restarts
    recovered = book.faults.recovered() if book.state == "Restarting" else []
    if recovered:
        return f"restarting after {cause_line(book, recovered[-1])}"
    return said


def cause_line(book: JobBook, cause: Cause) -> str:
    """``cause``'s line, in the diagnosis's words where those name where ranks run: the
    ranks cut off from each other, a killed rank's node and pod (a node that died)."""
    cut = partition_of(cause, book.rows)
    if cut is not None:
        return cut
    if cause.category == "killed" and not cause.same and place(book.rows.get(cause.rank)):
        return failed_sentence(cause, cell_line(book.faults.errors(), cause), book.rows)
    return cause.line()


def diagnosis(
    book: JobBook, now: float | None = None, slow: list[SlowRow] | None = None
) -> str | None:
    """The job's one-sentence reading (communication, hang or failure), or None.

    A stop or a success has none; a rank's own error outranks what the logs say.
    ``slow``: :func:`slow_rows` at ``now`` when the caller has them already.
    """
    if book.state in ("Stopped", "Succeeded"):
        return None
    for staged in book.staging.values():
        if staged.get("state") == "failed":
            return f"Data staging failed: {as_str(staged.get('message'))}"
    if book.state not in TERMINAL_STATES and (paused := book.pauses.ranks(book.rows)):
        return "; ".join(p.sentence() for p in paused)  # stopped in the debugger: no hang
    hang = hang_where(book)
    if hang is not None and book.state not in TERMINAL_STATES:
        return hang.sentence()
    if (ready := raised_sentence(book.state, book.rows)) is not None:
        return ready
    cause = book.cause()
    own = cause is not None and cause.category in ("raised", "exited")
    cut = partition_sentence(cause, book.faults.recovered(), book.rows)
    if cut := cut or book.comms.unresolved(book.rows):
        return cut  # who cannot reach whom, or the name no launcher could resolve
    comms = book.comms.summary()
    if not own and comms.failure != "none" and comms.diagnosis and comms_names_cause(comms):
        return comms.diagnosis
    if book.state == "Failed" and cause is not None:
        return failed_sentence(cause, cell_line(book.faults.errors(), cause), book.rows)
    if book.state == "Failed" and (book.message or book.reason):
        return f"the job failed: {book.message or book.reason}"
    if book.state == "Running" and (slow := slow_rows(book, now) if slow is None else slow):
        return slow_sentence(slow, nodes=large(book))
    return None


def hang_where(book: JobBook, now: float | None = None) -> Where | None:
    """The newest hang's stacks while no rank wrote anything since; else None."""
    request = book.stacks.hang(now_or_clock(now), lambda: up(book))
    return None if request is None else where(book, request)


def up(book: JobBook) -> list[int]:
    """The ranks that may still send stacks."""
    return [r.rank for r in book.rows.values() if r.state not in _ENDED_RANK]


def where(book: JobBook, request: str) -> Where:
    """The stacks of ``request`` grouped; a large job's sentence names nodes too."""
    nodes = {r: row.node for r, row in book.rows.items()} if large(book) else None
    return where_from(request, book.stacks.of(request) or {}, book.world_size, nodes)


def large(book: JobBook) -> bool:
    """Whether the job is large enough for its readings to name nodes and ranges."""
    return summarised(book.world_size)


def slow_rows(
    book: JobBook, now: float | None = None, stalled: Collection[int] | None = None
) -> list[SlowRow]:
    """Running ranks whose own step time is far above the median: a rank's ``step_time``
    metric where the ranks report one, else the interval between its steps. ``stalled``:
    the ranks stalled at ``now`` when the caller has them already."""
    at = now_or_clock(now)
    if stalled is None:
        stalled = book.pace.stalled_ranks(at)
    own = book.metrics.latest_of(STEP_TIME)
    times: dict[int, float] = {}
    for rank, row in book.rows.items():
        if row.state != "Running" or rank in stalled:
            continue
        if own:
            if rank in own and math.isfinite(own[rank]):
                times[rank] = own[rank]
        elif row.step_rate:
            times[rank] = 1.0 / row.step_rate
    return slow_ranks(times, {r: row.node for r, row in book.rows.items()})


def first_failure(book: JobBook) -> Failure | None:
    """The root cause as a :class:`Failure`, or None."""
    cause = book.cause()
    if cause is None:
        return None
    return Failure(cause.t, cause.rank, cause.reason, cause.attempt, cause.category)


def stragglers(book: JobBook) -> list[int]:
    """Running ranks whose last step is behind the median last step by more than
    ``max(straggler_steps, straggler_fraction * median)``."""
    steps = {
        r: row.step
        for r, row in book.rows.items()
        if row.state == "Running" and row.step is not None
    }
    if len(steps) < 2:
        return []
    median = statistics.median(steps.values())
    allowed = max(book.straggler_steps, book.straggler_fraction * median)
    return sorted(r for r, step in steps.items() if median - step > allowed)


def snapshot(book: JobBook, now: float | None = None) -> Snapshot:
    """A JSON-able summary of everything shown (see :class:`Snapshot`)."""
    at = now_or_clock(now)
    latest = book.metrics.latest_values()
    failure = first_failure(book)
    frontier = book.pace.frontier
    phases = book.phase_log.timeline(book.phases, book.world_size, at)
    cause = book.cause()
    stalled_ranks = book.pace.stalled_ranks(at)
    ranks = [
        rank_row(row, at, row.state == "Running" and row.rank in stalled_ranks, latest)
        for _, row in sorted(book.rows.items())
    ]
    hang = hang_where(book, at) if display_state(book, at) == "Hung" else None
    ranks = hung_rows(ranks, hang)  # who holds the others up, where each rank is
    rated = [r for r in ranks if r["state"] == "Running" and r["step"] is not None]
    live = book.state not in TERMINAL_STATES and (
        display_state(book, at) == "Hung" or (bool(rated) and all(r["stalled"] for r in rated))
    )
    stalled = live or ended_stalled(book)
    slow = slow_rows(book, at, stalled_ranks) if book.state == "Running" else []
    errors = book.faults.current_errors(book.attempt, book.state == "Stopped")
    return Snapshot(
        name=book.name,
        backend=book.backend,
        dist_backend=book.dist_backend,
        state=display_state(book, at),
        reason=book.reason,
        message=book.message,
        world_size=book.world_size,
        nodes=book.nodes,
        nproc=book.nproc,
        restarts=book.attempt,
        created=book.first_t,
        started=book.started_t,
        ended=book.end_t,
        now=at,
        elapsed=elapsed(book, at),
        step=frontier,
        steps_per_s=None if stalled else finite_or_none(book.pace.overall()),
        stalled=stalled,
        ranks=ranks,
        first_failure=None if failure is None else failure_row(failure),
        why=why(book),
        cause=None if cause is None else cause_row(cause),
        recovered=recovered_text(book.faults.recovered(), book.loaded),
        stragglers=stragglers(book),
        slow=slow,
        slow_line=slow_sentence(slow, nodes=large(book)),
        summary=state_ranges(ranks),
        metrics=book.metrics.rows(),
        checkpoints=[checkpoint_row(c) for c in book.checkpoints],
        errors=[error_row(e) for e in errors],
        has_result=book.result is not None,
        logs=LogSummary(kept=len(book.logs), total=book.logs.total, dropped=book.logs.dropped),
        version=book.version,
        diagnosis=diagnosis(book, at, slow),
        staging=[staging_row(f) for f in book.staging.values()],
        warnings=book.notices.listed(),
        phases=phases.rows,
        phase=phases.current,
        first_step_s=phases.first_step_s,
        progress=book.progress.row(book.state in TERMINAL_STATES),
    )


def ended_stalled(book: JobBook) -> bool:
    """Stopped or failed while every rank's steps stalled: its last rate is not current."""
    if book.state not in ("Stopped", "Failed") or book.end_t is None:
        return False
    return book.pace.all_stalled(book.end_t)


def elapsed(book: JobBook, now: float | None = None) -> float:
    """Seconds from the first event to the terminal event, or to ``now``."""
    if book.first_t is None:
        return 0.0
    end = book.end_t if book.end_t is not None else now_or_clock(now)
    return max(0.0, end - book.first_t)
