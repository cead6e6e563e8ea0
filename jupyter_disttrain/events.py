"""The typed event stream of a job, and parsing of the worker line protocol.

Pure: no I/O. A backend turns every line a worker prints into an
:class:`Event` with :func:`parse_line`, and reports what it sees itself
(process exits, restarts, pod phases, scheduling problems) with the
``job``/``rank``/``restart``/``phase`` kinds, so the monitor and the widgets see one
ordered stream per job whatever the backend.
"""

from __future__ import annotations

import json
import time
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Final, Literal, TypedDict, cast

from .linecheck import JOB_WIDE, MAX_LINE, Shape, metric_columns_fit, problem
from .runtime import jobkey
from .runtime.protocol import BATCHED_KINDS, PREFIX, VERSION, decode, signed_body
from .runtime.protocol import KINDS as PROTOCOL_KINDS

#: Kinds that come from workers (the line protocol) and plain log lines.
WORKER_KINDS: Final = (*PROTOCOL_KINDS, "log")
#: Kinds a backend emits from what it observes.
BACKEND_KINDS: Final = ("job", "rank", "restart", "phase")
#: Phases from submit to the first ``report()``, in order (see ``monitor/phases.py``).
PHASES: Final = ("queued", "scheduled", "image", "started", "rendezvous", "first_step")

JobState = Literal["Pending", "Running", "Restarting", "Succeeded", "Failed", "Stopped"]
JOB_STATES: Final = ("Pending", "Running", "Restarting", "Succeeded", "Failed", "Stopped")
TERMINAL_STATES: Final = frozenset({"Succeeded", "Failed", "Stopped"})
#: The state views show for a session cell's failed job while the ranks live on (each rank
#: Raised or Ready): the cell raised; the session waits for the next cell.
RAISED: Final = "Raised"
#: The shown states of a job that is over (terminal, or a session cell that raised).
ENDED_STATES: Final = TERMINAL_STATES | {RAISED}


# --- the fields of each kind (what arrives may lack any of them: read with .get) --------


class HelloFields(TypedDict, total=False):
    """``hello``: a rank is up, with its process group initialised."""

    local_rank: int
    world_size: int
    node_rank: int
    host: str
    pid: int
    launched_pid: int  # the process torchrun started (a stand-in when the launcher forked)
    backend: str
    versions: dict[str, str]
    restart: int
    task: dict[str, Any]


class MetricFields(TypedDict, total=False):
    """``metric``: ``report(step=..., **values)``."""

    step: int
    values: dict[str, float]


class CheckpointFields(TypedDict, total=False):
    """``checkpoint``: a checkpoint is fully written."""

    step: int
    uri: str
    bytes: int
    metrics: dict[str, float]


class ResultFields(TypedDict, total=False):
    """``result``: rank 0's value, inline (``data``) or in a file (``uri``)."""

    encoding: str
    data: str
    uri: str
    bytes: int


class ErrorFields(TypedDict, total=False):
    """``error``: an exception escaped user code."""

    type: str
    module: str
    message: str
    traceback: str
    type_pickle: str


class DoneFields(TypedDict, total=False):
    """``done``: the rank finished cleanly."""

    seconds: float


class StackFrame(TypedDict, total=False):
    """One thread of a ``stacks`` event: ``frames`` outermost first, ``[file, line, function]``."""

    name: str
    main: bool
    frames: list[list[Any]]
    call: str
    cell_line: int | None
    #: ``--where-locals``: a user frame's index in ``frames`` -> its locals, shortened.
    locals: dict[str, dict[str, str]]


class StacksFields(TypedDict, total=False):
    """``stacks``: a rank's threads, on request (``reason`` ``asked``) or at a hang (``hang``).

    ``request`` names the request (one event per request and rank counts);
    ``quiet`` is how long no rank had written anything (hangs);
    ``collective`` the last collective the rank entered, when torch records them.
    """

    request: str
    reason: str
    quiet: float
    threads: list[StackFrame]
    collective: dict[str, Any] | None
    pid: int


class StagingFields(TypedDict, total=False):
    """``staging``: a ``--data`` source being copied into a pod before training (job-wide).

    ``state`` is ``listing``, ``copying``, ``done`` or ``failed`` (with
    ``message``); ``done``/``total`` are bytes (``total`` None while unknown);
    ``host`` is the pod that copies.
    """

    src: str
    dest: str
    state: str
    done: int
    total: int | None
    files_done: int
    files_total: int
    host: str
    message: str


class LogFields(TypedDict, total=False):
    """``log``: a plain line (``source`` names an agent log for job-wide lines).

    ``rejected`` says why a line that looked like a control line was not believed.
    """

    text: str
    source: str
    rejected: str


class JobFields(TypedDict, total=False):
    """``job``: a job-wide state the backend observed."""

    state: str
    reason: str
    message: str


class RankFields(TypedDict, total=False):
    """``rank``: a per-rank fact the backend observed."""

    state: str
    exit_code: int | None
    reason: str
    host: str
    node: int | None
    pod: str


class PhaseFields(TypedDict, total=False):
    """``phase``: ranks reached (``done``) or wait in (``waiting``) a start-up phase.

    ``phase`` is one of :data:`PHASES`; ``ranks`` the ranks the fact is about
    (absent or None: the whole job); ``message`` says what they wait for
    (``pod tj-node-0-1 pulling image "x"``).
    """

    phase: str
    state: str
    ranks: list[int] | None
    message: str


class RestartFields(TypedDict, total=False):
    """``restart``: the backend restarted the workers."""

    attempt: int
    reason: str


class ResourcesFields(TypedDict, total=False):
    """``resources``: a rank's figures, about once a second; absent fields were not read.

    ``cpu_pct`` is % of one core (above 100 with threads); ``mem_limit_bytes``
    the cgroup memory limit; the GPU fields need CUDA and NVML.
    """

    cpu_pct: float
    rss_bytes: int
    mem_limit_bytes: int
    gpu_util_pct: float
    gpu_mem_bytes: int


class ProgressFields(TypedDict, total=False):
    """``progress``: rank 0 has done ``step`` of ``total`` steps (``report(total=)``, tqdm)."""

    step: int
    total: int


class RelayedFields(TypedDict, total=False):
    """``relayed``: lines rank 0 relayed for other ranks, many in one line
    (:func:`.runtime.protocol.relayed`: bodies, and metrics as columns), each checked as a
    line of its own (:func:`unpacked`)."""

    events: list[Event]


@dataclass(frozen=True, slots=True, init=False)
class Event:
    """One fact about a job.

    ``kind`` is a protocol kind (``hello``, ``metric``, ``checkpoint``,
    ``result``, ``error``, ``done``), ``log`` for a plain line, or a backend
    kind: ``job`` (``state``, ``reason``, ``message``), ``rank`` (``state``,
    ``exit_code``, ``reason``, ``host``), ``restart`` (``attempt``) or ``phase``
    (:class:`PhaseFields`).
    ``rank`` is the global rank, ``None`` for job-wide events. ``t`` is the
    Unix time the fact was produced. ``fields`` holds the kind's payload.
    """

    kind: str
    rank: int | None
    t: float
    fields: dict[str, Any]  # {} when not given (see __init__)

    def __init__(
        self, kind: str, rank: int | None, t: float, fields: dict[str, Any] | None = None
    ) -> None:
        # Frozen, yet made without the generated __init__'s object.__setattr__ per field
        # (half the cost; a kernel following 8,192 ranks makes ~8,000 events a second).
        _SET_KIND(self, kind)
        _SET_RANK(self, rank)
        _SET_T(self, t)
        _SET_FIELDS(self, {} if fields is None else fields)

    def get(self, key: str, default: Any = None) -> Any:
        """A payload field, or ``default``."""
        return self.fields.get(key, default)

    # Typed views of ``fields`` by kind (the same dict; keys checked by the type checker).
    def hello(self) -> HelloFields:
        """The fields of a ``hello`` event."""
        return cast(HelloFields, self.fields)

    def metric(self) -> MetricFields:
        """The fields of a ``metric`` event."""
        return cast(MetricFields, self.fields)

    def checkpoint(self) -> CheckpointFields:
        """The fields of a ``checkpoint`` event."""
        return cast(CheckpointFields, self.fields)

    def result(self) -> ResultFields:
        """The fields of a ``result`` event."""
        return cast(ResultFields, self.fields)

    def error(self) -> ErrorFields:
        """The fields of an ``error`` event."""
        return cast(ErrorFields, self.fields)

    def done(self) -> DoneFields:
        """The fields of a ``done`` event."""
        return cast(DoneFields, self.fields)

    def log(self) -> LogFields:
        """The fields of a ``log`` event."""
        return cast(LogFields, self.fields)

    def job(self) -> JobFields:
        """The fields of a ``job`` event."""
        return cast(JobFields, self.fields)

    def rank_fact(self) -> RankFields:
        """The fields of a ``rank`` event."""
        return cast(RankFields, self.fields)

    def phase(self) -> PhaseFields:
        """The fields of a ``phase`` event."""
        return cast(PhaseFields, self.fields)

    def restart(self) -> RestartFields:
        """The fields of a ``restart`` event."""
        return cast(RestartFields, self.fields)

    def stacks(self) -> StacksFields:
        """The fields of a ``stacks`` event."""
        return cast(StacksFields, self.fields)

    def staging(self) -> StagingFields:
        """The fields of a ``staging`` event."""
        return cast(StagingFields, self.fields)

    def resources(self) -> ResourcesFields:
        """The fields of a ``resources`` event."""
        return cast(ResourcesFields, self.fields)

    def progress(self) -> ProgressFields:
        """The fields of a ``progress`` event."""
        return cast(ProgressFields, self.fields)

    def relayed(self) -> RelayedFields:
        """The fields of a ``relayed`` event."""
        return cast(RelayedFields, self.fields)


@dataclass(frozen=True)
class Trust:
    """What a job's worker lines are checked against: the job's key and its shape."""

    key: bytes
    shape: Shape
    signer: jobkey.Signer = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "signer", jobkey.Signer(self.key))

    @classmethod
    def of(cls, key: bytes, nodes: int, nproc: int) -> Trust:
        """The trust of a job of ``nodes`` x ``nproc`` ranks signed with ``key``."""
        return cls(key, Shape(nodes * nproc, nodes, nproc))


#: The slots' own setters: how a frozen Event is made (see ``Event.__init__``).
_SET_KIND, _SET_RANK, _SET_T, _SET_FIELDS = (
    getattr(Event, name).__set__ for name in ("kind", "rank", "t", "fields")
)


def parse_line(
    line: str, rank: int | None, now: float | None = None, *, trust: Trust | None
) -> Event:
    """Turn one line read from ``rank``'s stream (None: a node's or agent's) into an event.

    A protocol line becomes its kind only when it carries a valid signature
    under ``trust``'s key, names a rank the stream may speak for (its own;
    rank 0's stream also carries what it relays for the others; a stream of
    no rank only job-wide kinds) and every field fits the job
    (:mod:`.linecheck`). Anything else is a ``log`` event whose ``text`` is the
    line without its line ending; a line that looked like a control line but
    failed carries the reason in ``rejected``. ``trust`` None (a job with no
    key): every line is log text.
    """
    text = line.rstrip("\r\n")
    stamp = time.time() if now is None else now
    if PREFIX not in text:
        return Event("log", rank, stamp, {"text": text})
    try:
        why = "the line is not signed with the job's key"
        if trust is not None and len(text) <= MAX_LINE:
            body = signed_body(text, trust.signer)
            if body is not None:
                event, why = _checked(body, rank, stamp, trust.shape)
                if event is not None:
                    return event
    except Exception as exc:  # printed text is data: nothing in a line may raise past here
        why = f"the line could not be read ({type(exc).__name__})"
    return Event("log", rank, stamp, {"text": text, "rejected": why})


#: The fields every protocol line has; an event keeps the others.
_ENVELOPE: Final = ("v", "kind", "rank", "t")


def _checked(body: str, stream: int | None, stamp: float, shape: Shape) -> tuple[Event | None, str]:
    fields, why = decode(body)
    if fields is None:
        return None, why
    event, why = _believed(fields, stream, shape, PROTOCOL_KINDS)
    if event is None or event.kind != "relayed":
        return event, why
    if stream != 0 or event.rank != 0:
        return None, "only rank 0's stream relays lines for other ranks"
    lines = event.fields.pop("lines", [])
    columns = event.fields.pop("metrics", None)
    events = [_relayed_line(item, stamp, shape) for item in lines]
    if columns is not None:
        events += _column_metrics(columns, stamp, shape)
    event.fields["events"] = events
    return event, ""


def _believed(
    fields: Any, stream: int | None, shape: Shape, kinds: tuple[str, ...]
) -> tuple[Event | None, str]:
    """The event of a line's decoded ``fields`` read from ``stream``, when it is of one of
    ``kinds`` and fits the job (``fields`` then become its fields); else None and why not
    (``fields`` unchanged)."""
    if not isinstance(fields, dict):
        return None, "the line's body is not a JSON object"
    if fields.get("v") != VERSION:
        return None, "the line is not of this protocol version"
    kind, src = fields.get("kind"), fields.get("rank")
    t: Any = fields.get("t")  # a finite number once problem() found none
    if not isinstance(kind, str) or kind not in kinds:
        return None, f"unknown kind {kind!r}"
    wrong = problem(kind, src, t, fields, shape)
    if wrong is not None:
        return None, wrong
    if src != stream and stream != 0 and not (stream is None and kind in JOB_WIDE):
        return None, f"rank {stream}'s stream cannot speak for rank {src}"
    for name in _ENVELOPE:
        fields.pop(name, None)
    return Event(kind, src, float(t), fields), ""


def _relayed_line(item: Any, stamp: float, shape: Shape) -> Event:
    """One line a ``relayed`` line carries, believed as a line of rank 0's stream would be
    but only of :data:`~.runtime.protocol.BATCHED_KINDS`; else a rejected log line there."""
    event, why = _believed(item, 0, shape, BATCHED_KINDS)
    if event is not None:
        return event
    text = PREFIX + json.dumps(item, separators=(",", ":"))
    return Event("log", 0, stamp, {"text": text, "rejected": why})


def _column_metrics(columns: dict[str, list[Any]], stamp: float, shape: Shape) -> list[Event]:
    """The metric events of a ``relayed`` line's columns (their lengths checked), each
    believed as the metric line it stands for would be (:func:`_relayed_line`)."""
    ranks, times, steps, values = (columns[name] for name in ("rank", "t", "step", "values"))
    if metric_columns_fit(ranks, times, steps, values, shape):
        return [
            Event("metric", rank, t, {"step": step, "values": value})
            for rank, t, step, value in zip(ranks, times, steps, values, strict=True)
        ]
    return [  # an entry does not fit: each read alone, to say which and why
        _relayed_line(
            {"v": VERSION, "kind": "metric", "rank": rank, "t": t, "step": step, "values": value},
            stamp,
            shape,
        )
        for rank, t, step, value in zip(ranks, times, steps, values, strict=True)
    ]


def unpacked(event: Event) -> list[Event]:
    """The events ``event`` stands for: each line a ``relayed`` event carries; else itself."""
    if event.kind == "relayed":
        return list(event.relayed().get("events", []))
    return [event]


def job_event(
    state: JobState, reason: str = "", message: str = "", t: float | None = None
) -> Event:
    """A job-wide state change observed by the backend."""
    return Event(
        "job",
        None,
        time.time() if t is None else t,
        {"state": state, "reason": reason, "message": message},
    )


def rank_event(
    rank: int,
    state: str,
    *,
    exit_code: int | None = None,
    reason: str = "",
    host: str = "",
    node: int | None = None,
    t: float | None = None,
    pod: str = "",
) -> Event:
    """A per-rank fact observed by the backend (``Pending``, ``Running``, ``Exited``...).

    ``pod``: the Kubernetes pod the rank runs in ("" elsewhere).
    """
    fields = {"state": state, "exit_code": exit_code, "reason": reason, "host": host, "node": node}
    if pod:
        fields["pod"] = pod
    return Event("rank", rank, time.time() if t is None else t, fields)


def restart_event(attempt: int, reason: str = "", t: float | None = None) -> Event:
    """The backend restarted the workers (``attempt`` counts from 1)."""
    return Event(
        "restart", None, time.time() if t is None else t, {"attempt": attempt, "reason": reason}
    )


def phase_event(
    phase: str,
    state: Literal["waiting", "done"],
    ranks: list[int] | None = None,
    message: str = "",
    t: float | None = None,
) -> Event:
    """Ranks (None: all) reached or wait in start-up phase ``phase`` (one of :data:`PHASES`)."""
    return Event(
        "phase",
        None,
        time.time() if t is None else t,
        {"phase": phase, "state": state, "ranks": ranks, "message": message},
    )


class FirstCopies:
    """Tells the first copy of a worker line from its repeats.

    Rank 0 relays the other ranks' protocol lines into its own log, so one line
    can arrive twice (from its rank's log and from rank 0's). A line is known
    by ``(kind, rank, t, step)``; only ``kinds`` are checked, and the last
    ``limit`` lines are remembered (the oldest forgotten first).
    """

    def __init__(self, kinds: frozenset[str], limit: int = 200_000) -> None:
        self.kinds = kinds
        self.limit = limit
        self._seen: set[tuple[str, int | None, float, object]] = set()
        self._order: deque[tuple[str, int | None, float, object]] = deque()

    def first(self, event: Event) -> bool:
        """False when ``event`` repeats a line seen before; True otherwise (and remembers it)."""
        return bool(self.firsts((event,)))

    def firsts(self, events: Iterable[Event]) -> list[Event]:
        """Those of ``events`` that are first copies (as :meth:`first` each, in order)."""
        kinds, seen, order, limit = self.kinds, self._seen, self._order, self.limit
        out: list[Event] = []
        for event in events:
            if event.kind in kinds:
                mark = (event.kind, event.rank, event.t, event.fields.get("step"))
                if mark in seen:
                    continue
                seen.add(mark)
                order.append(mark)
                if len(order) > limit:
                    seen.discard(order.popleft())
            out.append(event)
        return out


def to_json(event: Event) -> str:
    """One JSON line for a stored event stream (see :func:`from_json`)."""
    return json.dumps(
        {"kind": event.kind, "rank": event.rank, "t": event.t, **event.fields},
        separators=(",", ":"),
    )


def from_json(line: str) -> Event:
    """Inverse of :func:`to_json`."""
    body = json.loads(line)
    return Event(body.pop("kind"), body.pop("rank"), float(body.pop("t")), body)
