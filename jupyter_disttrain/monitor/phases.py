"""Time to first step: a job's start-up phases, computed from its events (pure).

The phases, in order (:data:`~jupyter_disttrain.events.PHASES`): ``queued``
(waiting for admission and for its pods to exist), ``scheduled`` (every pod
placed on a node), ``image`` (every pod's training image pulled; init
containers run in this phase too), ``started`` (every worker process or
container started), ``rendezvous`` (every rank's ``hello``: its process
group is initialised) and ``first_step`` (the first ``report()``). A backend
observes some of them (``Capabilities.phases``); the timeline has a row for
each of those.

A phase ends when its last rank is through it; it starts where the previous
observed phase ended (the first one at submit: the earliest ``job`` or
``phase`` event). A rank through a phase is through every earlier one (a
``hello`` proves its pod was scheduled, pulled and started), so a missed
backend fact never leaves a phase open. Times are the events' ``t``, so the
result does not depend on the order events arrive in.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Final, NamedTuple, TypedDict

from ..events import PHASES, TERMINAL_STATES, Event
from ..logbuffer import rank_label
from ..units import duration

#: Short names shown in the timeline.
LABELS: Final = {
    "queued": "queued",
    "scheduled": "scheduled",
    "image": "image",
    "started": "started",
    "rendezvous": "rendezvous",
    "first_step": "first step",
}
#: What a job waiting in a phase waits for ("waiting 2m10s in: image pull").
WAITING: Final = {
    "queued": "queue",
    "scheduled": "scheduling",
    "image": "image pull",
    "started": "worker start",
    "rendezvous": "rendezvous",
    "first_step": "first step",
}
#: Events a :class:`PhaseLog` keeps at most (hellos and the first metric always).
MAX_KEPT: Final = 20_000


class PhaseRow(TypedDict):
    """One phase of the timeline.

    ``state`` is ``done``, ``active`` (the job is in it; once the job failed
    or stopped in it, ``ended`` is the job's end) or ``pending`` (not reached,
    or not seen: a job that succeeded went through phases whose facts are gone).
    ``duration_s`` runs to ``ended`` or, while active, to now. ``detail``
    says what an active phase waits for ("" otherwise).
    """

    name: str
    label: str
    state: str
    started: float | None
    ended: float | None
    duration_s: float | None
    detail: str


class Timeline(NamedTuple):
    """The rows, the current phase (None when none is active or the job ended), first step."""

    rows: list[PhaseRow]
    current: str | None
    first_step_s: float | None


class PhaseLog:
    """The events a timeline needs, kept as they arrive (not thread-safe: the monitor locks).

    ``job`` and ``phase`` events, each rank's first ``hello`` and the earliest
    ``metric`` (by its time, whatever order the ranks' lines arrive in: a job
    followed live and the same job replayed from its records read the same
    first step); everything else is dropped.
    """

    def __init__(self) -> None:
        self.events: list[Event] = []
        self._hello: set[int] = set()
        self._first_metric: Event | None = None
        self._cached: tuple[tuple[int, float, tuple[str, ...], int], Timeline] | None = None

    def add(self, event: Event) -> None:
        """Keep ``event`` if the timeline needs it."""
        if event.kind == "hello":
            if event.rank is None or event.rank in self._hello:
                return
            self._hello.add(event.rank)
        elif event.kind == "metric":
            if self._first_metric is None or event.t < self._first_metric.t:
                self._first_metric = event
            return
        elif event.kind not in ("job", "phase") or len(self.events) >= MAX_KEPT:
            return
        self.events.append(event)

    def timeline(self, observable: Sequence[str], world_size: int, now: float) -> Timeline:
        """:func:`timeline` of the kept events (reused while nothing in it depends on ``now``)."""
        first = self._first_metric
        metric_t = float("-inf") if first is None else first.t
        key = (len(self.events), metric_t, tuple(observable), world_size)
        if self._cached is None or self._cached[0] != key:
            kept = self.events if first is None else [*self.events, first]
            line = timeline(kept, observable, world_size, now)
            if any(row["state"] == "active" and row["ended"] is None for row in line.rows):
                return line
            self._cached = (key, line)
        line = self._cached[1]
        return Timeline([PhaseRow(**row) for row in line.rows], line.current, line.first_step_s)


def timeline(
    events: Iterable[Event], observable: Sequence[str], world_size: int, now: float
) -> Timeline:
    """The phases in ``observable`` (in :data:`PHASES` order) of a job of ``world_size`` ranks."""
    names = [p for p in PHASES if p in observable]
    order = {p: i for i, p in enumerate(PHASES)}
    done: dict[str, dict[int, float]] = {p: {} for p in PHASES}
    waiting: dict[str, dict[int | None, tuple[float, str]]] = {p: {} for p in PHASES}
    start: float | None = None
    end: float | None = None
    succeeded = False
    first_metric: float | None = None
    everyone = range(world_size)

    def reach(phase: str, ranks: Iterable[int], t: float) -> None:
        """``ranks`` are through ``phase`` and every phase before it at ``t``."""
        for name in PHASES[: order[phase] + 1]:
            seen = done[name]
            for rank in ranks:
                if 0 <= rank < world_size and t < seen.get(rank, float("inf")):
                    seen[rank] = t

    for ev in events:
        if ev.kind == "job":
            start = ev.t if start is None else min(start, ev.t)
            end = ev.t if ev.get("state") in TERMINAL_STATES else None
            succeeded = ev.get("state") == "Succeeded"
        elif ev.kind == "phase":
            f = ev.phase()
            phase, ranks = str(f.get("phase", "")), f.get("ranks")
            if phase not in order:
                continue
            start = ev.t if start is None else min(start, ev.t)
            if f.get("state") == "done":
                reach(phase, everyone if ranks is None else ranks, ev.t)
            else:
                for key in [None] if ranks is None else ranks:
                    if ev.t >= waiting[phase].get(key, (float("-inf"), ""))[0]:
                        waiting[phase][key] = (ev.t, str(f.get("message") or ""))
        elif ev.kind == "hello" and ev.rank is not None:
            reach("rendezvous", [ev.rank], ev.t)
        elif ev.kind == "metric":
            first_metric = ev.t if first_metric is None else min(first_metric, ev.t)
    if first_metric is not None:
        reach("rendezvous", everyone, first_metric)  # a step means every rank was up

    rows: list[PhaseRow] = []
    current: str | None = None
    previous = start
    active_seen = False
    for name in names:
        if name == "first_step":
            ended = first_metric
        else:
            seen = done[name]
            ended = max(seen.values()) if len(seen) >= world_size and seen else None
        if ended is not None and not active_seen:
            begun = previous if previous is not None else ended
            ended = max(ended, begun)
            rows.append(_row(name, "done", begun, ended, ""))
            previous = ended
        elif not active_seen and previous is not None and not succeeded:
            active_seen = True
            stop = end if end is not None else now
            lagging = [r for r in everyone if r not in done[name]]
            detail = _detail(name, lagging, waiting[name], world_size)
            rows.append(_row(name, "active", previous, end, detail, max(0.0, stop - previous)))
            current = None if end is not None else name
        else:
            rows.append(_row(name, "pending", None, None, ""))
    first_step_s = None
    if first_metric is not None and start is not None:
        first_step_s = max(0.0, first_metric - start)
    return Timeline(rows, current, first_step_s)


def _row(
    name: str,
    state: str,
    started: float | None,
    ended: float | None,
    detail: str,
    seconds: float | None = None,
) -> PhaseRow:
    if seconds is None and started is not None and ended is not None:
        seconds = max(0.0, ended - started)
    return PhaseRow(
        name=name,
        label=LABELS[name],
        state=state,
        started=started,
        ended=ended,
        duration_s=seconds,
        detail=detail,
    )


def _detail(
    name: str, lagging: list[int], waiting: dict[int | None, tuple[float, str]], world: int
) -> str:
    """What the ranks still in phase ``name`` wait for, from their newest ``waiting`` facts."""
    groups: dict[str, list[int]] = {}
    for rank in lagging:
        found = waiting.get(rank)
        if found is not None and found[1]:
            groups.setdefault(found[1], []).append(rank)
    if groups:
        parts = [f"{rank_label(tuple(ranks))}: {message}" for message, ranks in groups.items()]
        shown = "; ".join(parts[:2])
        return shown + (f"; {len(parts) - 2} more" if len(parts) > 2 else "")
    job_wide = waiting.get(None)
    if job_wide is not None and job_wide[1]:
        return job_wide[1]
    if name == "first_step":
        return "no report() yet"
    if not lagging:
        return ""
    if name == "rendezvous":
        return (
            f"{world - len(lagging)} of {world} ranks up, waiting for {rank_label(tuple(lagging))}"
        )
    if name == "started":
        return f"{rank_label(tuple(lagging))} not started yet"
    return f"waiting for {rank_label(tuple(lagging))}"


def summary(rows: Sequence[PhaseRow]) -> str:
    """``queued 0.4s · scheduled 1.2s · image 35s · …`` for the phases reached so far."""
    return " · ".join(phase_text(row) for row in rows if row["state"] != "pending")


def phase_text(row: PhaseRow) -> str:
    """``image 35.0s``; ``image 2m10s (not finished)`` for the phase a job ended in."""
    if row["duration_s"] is None:
        return row["label"]
    unfinished = " (not finished)" if row["state"] == "active" and row["ended"] is not None else ""
    return f"{row['label']} {duration(row['duration_s'])}{unfinished}"


def waiting_line(rows: Sequence[PhaseRow], current: str | None) -> str:
    """``waiting 2m10s in: image pull (ranks 2-3: pod … pulling image "…")``, or "" if none."""
    for row in rows:
        if row["name"] == current and row["duration_s"] is not None:
            detail = f" ({row['detail']})" if row["detail"] else ""
            return f"waiting {duration(row['duration_s'])} in: {WAITING[row['name']]}{detail}"
    return ""
