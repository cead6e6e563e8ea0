"""The JSON the lab extension sees. :func:`job_json` is the one place a job object is built.

Every response of ``/disttrain/api/...`` is one of the TypedDicts below
(a rank is :class:`~jupyter_disttrain.monitor.RankJSON`, the monitor's own);
:data:`TYPESCRIPT` names the interface of each in ``labextension/src/types.ts``,
which a test checks field by field against them. Floats are finite or, for metric
values, the strings ``"NaN"``/``"Infinity"``/``"-Infinity"`` (see
:data:`~jupyter_disttrain.monitor.JSONFloat`); any other non-finite number a
job's lines brought in becomes ``null`` (:func:`json_safe`), so the JSON is
always valid.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from pathlib import PurePosixPath
from typing import Any, TypedDict, TypeVar, cast

from ..backends.base import JobRecord
from ..events import TERMINAL_STATES
from ..monitor import (
    CauseRow,
    ErrorRow,
    JSONFloat,
    MetricRow,
    PhaseRow,
    ProgressRow,
    RankJSON,
    Snapshot,
    rank_json,
)
from ..monitor.records import SlowRow, StateRange
from ..monitor.scale import differing, summarised
from ..monitor.text import lost_peer, shown_diagnosis
from ..spec import job_source


class BackendStatus(TypedDict):
    """One configured backend: ``error`` says why its jobs are missing ("" when listed)."""

    name: str
    ok: bool
    error: str


class CheckpointJSON(TypedDict):
    """A checkpoint of the job.

    ``status``: ``ok``, ``incomplete`` or ``corrupt`` as its directory's
    manifest says, or ``reported`` (a rank reported it; the directory was not read).
    """

    step: int
    uri: str
    bytes: int | None
    rank: int | None
    t: float
    status: str


class ErrorJSON(ErrorRow):
    """A rank's error in an expanded row: ``peer`` says ``lost its peer (rank 1 failed)``
    when the error only reports that the failing rank ended ("" otherwise); its raw text
    is then shown behind a disclosure."""

    peer: str


class JobDetail(TypedDict):
    """What an expanded row shows (``None`` in listings)."""

    ranks: list[RankJSON]
    metrics: dict[str, MetricRow]
    checkpoints: list[CheckpointJSON]
    errors: list[ErrorJSON]
    stragglers: list[int]
    followed: bool  # False: no event stream read for this job (ranks unknown)
    # a large job (more than monitor.scale.SUMMARY_AT ranks) lists in ``ranks`` only the
    # ranks that differ; ``summary`` gives every rank by state as ranges
    ranks_total: int
    summary: list[StateRange]
    slow: list[SlowRow]


class JobJSON(TypedDict):
    """A job as a row of the sidebar table.

    ``id`` is ``backend/name`` (names are unique per backend only).
    ``step`` is the highest step any rank reported; ``metrics`` the mean of
    each metric over the ranks' latest values. ``notebook`` is the notebook
    that started the job as a path the server's contents API opens, ``None``
    when unknown or outside the server root; ``notebook_file`` is the path as
    recorded ("" when unknown). ``diagnosis`` is the job's one-sentence
    reading (communication problem or failure), ``None`` when there is none or it
    only repeats ``reason``.
    ``phases``, ``phase``, ``first_step_s``: time to first step, as in the
    monitor's snapshot (empty, None, None when no event stream is read).
    ``progress`` is rank 0's steps done of a known total with rate and ETA
    (:class:`~jupyter_disttrain.monitor.ProgressRow`), ``None`` without one.
    ``source`` is ``session`` for a warm worker group (``%distrain_session``), else ``job``.
    ``error`` says why the job's view could not be built ("" when it was): the
    job is then shown from its record alone (:func:`record_json`).
    Where the event stream is read, ``state`` is ``Hung`` while a detected hang
    lasts (``Paused`` while ranks are stopped in the debugger, ``reason`` saying
    where), ``reason`` is the monitor's one line (:attr:`JobMonitor.reason`: for a
    failure its root cause and consequences), ``cause_rank`` the rank that caused
    a failure, ``recovered`` the failures a restart recovered from ("" none) and
    ``stalled`` whether the running ranks stopped reporting (``steps_per_s`` is then None).
    """

    id: str
    name: str
    backend: str
    state: str
    reason: str
    world_size: int
    nodes: int
    nproc: int
    created: float
    ended: float | None
    elapsed: float
    step: int | None
    steps_per_s: float | None
    metrics: dict[str, JSONFloat]
    notebook: str | None
    notebook_file: str
    can_stop: bool
    diagnosis: str | None
    detail: JobDetail | None
    phases: list[PhaseRow]
    phase: str | None
    first_step_s: float | None
    progress: ProgressRow | None
    source: str
    error: str
    cause_rank: int | None
    recovered: str
    stalled: bool


class JobListJSON(TypedDict):
    """``GET /disttrain/api/jobs``: jobs of every backend, newest first."""

    jobs: list[JobJSON]
    backends: list[BackendStatus]
    running: int
    now: float


class LogsJSON(TypedDict):
    """``GET .../logs?rank=&tail=``: a rank's (or every rank's) last lines."""

    id: str
    rank: int | None
    tail: int | None
    ranks: list[int]
    text: str
    message: str


class StopJSON(TypedDict):
    """``POST .../stop``: whether a running job was asked to stop, and the job now."""

    stopped: bool
    job: JobJSON


class NamespaceJobJSON(TypedDict):
    """A row of the sidebar's namespace section: any job of a backend's scope, whoever
    started it (a Kubeflow SDK TrainJob, a pipeline's, a colleague's, this tool's).

    ``id`` is ``backend/name`` as :class:`JobJSON`'s (the detail and logs of
    ``/disttrain/api/jobs/<id>`` serve it too); ``workload`` its Kubeflow kind;
    ``progress`` the percent the job reports itself (Trainer's ``trainerStatus``),
    ``eta`` the seconds left it reports (None without); ``started_by`` its
    ``app.kubernetes.io/managed-by`` label ("" none); ``foreign`` True when this
    tool did not start it; ``can_stop`` False when it is over or RBAC does not
    let this user delete it (the row is then read-only).
    """

    id: str
    name: str
    backend: str
    workload: str
    state: str
    reason: str
    progress: int | None
    eta: int | None
    created: float
    nodes: int
    started_by: str
    foreign: bool
    can_stop: bool


class NamespaceJSON(TypedDict):
    """``GET /disttrain/api/namespace``: every job of the configured backends' scopes."""

    jobs: list[NamespaceJobJSON]
    backends: list[BackendStatus]
    now: float


def namespace_job_json(record: JobRecord, *, may_stop: bool) -> NamespaceJobJSON:
    """The namespace section's row of ``record`` (a :meth:`Backend.list_namespace` one)."""
    facts = record.facts
    return NamespaceJobJSON(
        id=f"{record.backend}/{record.name}",
        name=record.name,
        backend=record.backend,
        workload=facts.workload or "job",
        state=record.state,
        reason=record.reason,
        progress=facts.progress,
        eta=facts.eta,
        created=record.created if math.isfinite(record.created) else 0.0,
        nodes=record.nodes,
        started_by=facts.started_by,
        foreign=facts.foreign,
        can_stop=may_stop and record.state not in TERMINAL_STATES,
    )


#: The TypeScript interface of each JSON shape (``labextension/src/types.ts``).
TYPESCRIPT: dict[str, type] = {
    "IBackendStatus": BackendStatus,
    "IRank": RankJSON,
    "IMetricRow": MetricRow,
    "ICheckpoint": CheckpointJSON,
    "IErrorRow": ErrorJSON,
    "IJobDetail": JobDetail,
    "IStateRange": StateRange,
    "ISlowRow": SlowRow,
    "IProgress": ProgressRow,
    "IPhase": PhaseRow,
    "IJob": JobJSON,
    "IJobList": JobListJSON,
    "ILogs": LogsJSON,
    "IStopResult": StopJSON,
    "INamespaceJob": NamespaceJobJSON,
    "INamespace": NamespaceJSON,
}


def job_json(
    record: JobRecord,
    snapshot: Snapshot | None,
    *,
    now: float,
    detail: bool = False,
    root_dir: str | None = None,
    checkpoints: Callable[[list[CheckpointJSON]], list[CheckpointJSON]] | None = None,
) -> JobJSON:
    """The sidebar's view of one job.

    The state, times and scale come from the backend's ``record`` (the
    authority on whether a job runs); progress, ranks, metrics and
    checkpoints from the ``snapshot`` of a monitor fed with the job's event
    stream, when one is followed. ``detail`` adds :class:`JobDetail`, whose
    checkpoints are ``checkpoints(reported)`` (default: the ``reported`` ones).
    """
    recorded = str(record.extra.get("notebook") or "")
    terminal = record.state in TERMINAL_STATES
    state, reason = record.state, record.reason
    read = snapshot is not None and snapshot["created"] is not None
    if snapshot is not None and read:  # the monitor's one reading, where it agrees on the state
        if record.state == "Failed" and snapshot["cause"] is not None:
            reason = snapshot["cause"]["line"]
        elif record.state == "Running" and snapshot["state"] == "Hung":
            state, reason = "Hung", ""
        elif record.state == "Running" and snapshot["state"] == "Paused":  # in the debugger
            state = "Paused"
            reason = "; ".join(r["reason"] for r in snapshot["ranks"] if r["state"] == "Paused")
        elif record.state == snapshot["state"] and snapshot["why"]:
            reason = snapshot["why"]
    if snapshot is not None and read:  # events were read
        elapsed = snapshot["elapsed"]
        step, rate = snapshot["step"], snapshot["steps_per_s"]
        metrics = {name: row["mean"] for name, row in snapshot["metrics"].items()}
    else:
        end = record.ended if record.ended is not None else (None if terminal else now)
        elapsed = max(0.0, end - record.created) if end is not None and record.created else 0.0
        step, rate, metrics = None, None, {}
        metrics = dict(record.facts.reported_metrics)  # what the job's object says
    progress = _progress(snapshot["progress"]) if snapshot is not None else None
    if progress is None and record.facts.progress is not None:
        progress = reported_progress(record.facts.progress, record.facts.eta)
    return json_safe(
        JobJSON(
            id=f"{record.backend}/{record.name}",
            name=record.name,
            backend=record.backend,
            state=state,
            reason=reason,
            world_size=record.world_size,
            nodes=record.nodes,
            nproc=record.nproc,
            created=record.created,
            ended=record.ended,
            elapsed=_finite(elapsed),
            step=step,
            steps_per_s=None if rate is None else _finite(rate),
            metrics=metrics,
            notebook=notebook_api_path(recorded, root_dir),
            notebook_file=recorded,
            can_stop=not terminal,
            diagnosis=shown_diagnosis(snapshot) if snapshot is not None else None,
            detail=_detail(snapshot, checkpoints) if detail else None,
            phases=snapshot["phases"] if snapshot is not None else [],
            phase=snapshot["phase"] if snapshot is not None else None,
            first_step_s=snapshot["first_step_s"] if snapshot is not None else None,
            progress=progress,
            source=job_source(record.extra),
            error="",
            cause_rank=snapshot["cause"]["rank"] if snapshot and snapshot["cause"] else None,
            recovered=snapshot["recovered"] if snapshot is not None else "",
            stalled=bool(snapshot and snapshot["stalled"]) and not terminal,
        )
    )


def record_json(record: JobRecord, *, now: float, error: str) -> JobJSON:
    """A job shown from its ``record`` alone, with ``error`` saying why its view is missing.

    Built without computing anything from the record, so it cannot fail itself.
    """

    def number(value: object) -> float:
        return value if isinstance(value, float | int) and math.isfinite(value) else 0.0

    def whole(value: object) -> int:
        return value if isinstance(value, int) else 0

    terminal = record.state in TERMINAL_STATES
    return json_safe(
        JobJSON(
            id=f"{record.backend}/{record.name}",
            name=str(record.name),
            backend=str(record.backend),
            state=str(record.state),
            reason=str(record.reason),
            world_size=whole(record.world_size),
            nodes=whole(record.nodes),
            nproc=whole(record.nproc),
            created=number(record.created),
            ended=None,
            elapsed=0.0,
            step=None,
            steps_per_s=None,
            metrics={},
            notebook=None,
            notebook_file=str(record.extra.get("notebook") or ""),
            can_stop=not terminal,
            diagnosis=None,
            detail=None,
            phases=[],
            phase=None,
            first_step_s=None,
            progress=None,
            source=job_source(record.extra),
            error=error,
            cause_rank=None,
            recovered="",
            stalled=False,
        )
    )


T = TypeVar("T")


def json_safe(value: T) -> T:
    """``value`` with every non-finite float (NaN, +-inf) replaced by None, recursively.

    Metric values arrive as the strings ``"NaN"``/``"Infinity"`` and stay so; a
    non-finite number anywhere else (a line's time, a rate) cannot be sent as JSON.
    """
    return cast(T, _safe(value))


def _safe(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_safe(v) for v in value]
    return value


def _detail(
    snapshot: Snapshot | None,
    checkpoints: Callable[[list[CheckpointJSON]], list[CheckpointJSON]] | None,
) -> JobDetail:
    if snapshot is None:
        listed = checkpoints([]) if checkpoints else []
        return JobDetail(
            ranks=[],
            metrics={},
            checkpoints=listed,
            errors=[],
            stragglers=[],
            followed=False,
            ranks_total=0,
            summary=[],
            slow=[],
        )
    rows = snapshot["ranks"]
    if summarised(len(rows)):  # summaries, not thousands of rows
        first = snapshot["first_failure"]
        marked = [r["rank"] for r in snapshot["slow"]] + snapshot["stragglers"]
        rows = differing(rows, marked + ([] if first is None else [first["rank"]]))
    ranks = [rank_json(r) for r in rows]
    reported = [
        CheckpointJSON(
            step=c["step"],
            uri=c["uri"],
            bytes=c["bytes"],
            rank=c["rank"],
            t=c["t"],
            status="reported",
        )
        for c in snapshot["checkpoints"]
    ]
    return JobDetail(
        ranks=ranks,
        metrics=snapshot["metrics"],
        checkpoints=checkpoints(reported) if checkpoints else reported,
        errors=[error_json(e, snapshot["cause"]) for e in snapshot["errors"]],
        stragglers=snapshot["stragglers"],
        followed=True,
        ranks_total=len(snapshot["ranks"]),
        summary=snapshot["summary"],
        slow=snapshot["slow"],
    )


def error_json(error: ErrorRow, cause: CauseRow | None) -> ErrorJSON:
    """``error`` with what it says of the job (see :class:`ErrorJSON`)."""
    rank, reason = error["rank"], f"{error['type']}: {error['message']}"
    return ErrorJSON(**error, peer="" if rank is None else lost_peer(rank, reason, cause))


def notebook_api_path(recorded: str, root_dir: str | None) -> str | None:
    """``recorded`` (absolute, or relative to the server root) as a contents-API path.

    ``None`` when nothing is recorded, the notebook lies outside ``root_dir``, or the
    recorded path cannot be a file's (a NUL character).
    """
    if not recorded or "\0" in recorded:
        return None
    if os.path.isabs(recorded):
        if not root_dir:
            return None
        root = os.path.realpath(os.path.expanduser(root_dir))
        path = os.path.realpath(recorded)
        if os.path.commonpath([root, path]) != root:
            return None
        recorded = os.path.relpath(path, root)
    parts = PurePosixPath(recorded.replace(os.sep, "/")).parts
    if not parts or ".." in parts:
        return None
    return "/".join(parts)


def reported_progress(percent: int, eta: object) -> ProgressRow:
    """The progress a job reports in its object (percent done, seconds left) as a row."""
    seconds = float(eta) if isinstance(eta, int) else None
    return ProgressRow(
        step=percent, total=100, fraction=percent / 100, eta_s=seconds, rate_per_s=None
    )


def _progress(row: ProgressRow | None) -> ProgressRow | None:
    if row is None:
        return None
    eta, rate = row["eta_s"], row["rate_per_s"]
    return ProgressRow(
        step=row["step"],
        total=row["total"],
        fraction=_finite(row["fraction"]),
        eta_s=None if eta is None or not math.isfinite(eta) else eta,
        rate_per_s=None if rate is None or not math.isfinite(rate) else rate,
    )


def _finite(value: float) -> float:
    return value if math.isfinite(value) else 0.0
