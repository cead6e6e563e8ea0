"""A monitor's facts as the JSON rows of its :class:`~.records.Snapshot` (pure)."""

from __future__ import annotations

from ..events import StagingFields
from ..runtime.numbers import finite_or_none
from .cause import Cause
from .records import (
    CauseRow,
    Checkpoint,
    CheckpointRow,
    ErrorInfo,
    ErrorRow,
    Failure,
    FailureRow,
    JSONFloat,
    RankRow,
    RankState,
    as_int,
    as_str,
)


def rank_row(
    row: RankState, now: float, stalled: bool, latest: dict[int, dict[str, JSONFloat]]
) -> RankRow:
    """One rank's row at ``now``; a ``stalled`` rank shows no current step rate."""
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
        step_rate=None if stalled else finite_or_none(row.step_rate),
        stalled=stalled,
        last_heard=row.last_heard,
        silent_s=row.silent_for(now),
        exit_code=row.exit_code,
        reason=row.reason,
        latest=dict(latest.get(row.rank, {})),
        cpu_pct=row.cpu_pct,
        rss_bytes=row.rss_bytes,
        mem_limit_bytes=row.mem_limit_bytes,
        gpu_util_pct=row.gpu_util_pct,
        gpu_mem_bytes=row.gpu_mem_bytes,
    )


def failure_row(failure: Failure) -> FailureRow:
    """The first failure's row."""
    return FailureRow(rank=failure.rank, t=failure.t, reason=failure.reason)


def cause_row(cause: Cause) -> CauseRow:
    """The cause's row, with its one-line reading."""
    return CauseRow(
        rank=cause.rank,
        category=cause.category,
        reason=cause.reason,
        consequences=list(cause.consequences),
        line=cause.line(),
    )


def checkpoint_row(c: Checkpoint) -> CheckpointRow:
    """A saved checkpoint's row."""
    return CheckpointRow(step=c.step, uri=c.uri, bytes=c.bytes, rank=c.rank, t=c.t)


def error_row(e: ErrorInfo) -> ErrorRow:
    """A rank error's row, its traceback included."""
    return ErrorRow(rank=e.rank, t=e.t, type=e.type, message=e.message, traceback=e.traceback)


def staging_row(f: StagingFields) -> StagingFields:
    """A staging transfer's fields, each of its type (missing ones empty or zero)."""
    total = f.get("total")
    return StagingFields(
        src=as_str(f.get("src")),
        dest=as_str(f.get("dest")),
        state=as_str(f.get("state")),
        done=as_int(f.get("done")) or 0,
        total=total if isinstance(total, int) else None,
        files_done=as_int(f.get("files_done")) or 0,
        files_total=as_int(f.get("files_total")) or 0,
        host=as_str(f.get("host")),
        message=as_str(f.get("message")),
    )
