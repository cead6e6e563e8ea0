"""The state of one job, built from its event stream: :class:`JobMonitor` and its records.

``core`` holds the monitor (one lock over a job's facts, shared between
threads), ``state`` the book of those facts (job and rank state, result,
errors, logs, communication) and how each event changes them, ``readings``
what they read as (diagnosis, hang, snapshot), ``metrics`` the metric store,
``records`` the records and JSON-able snapshot shapes, ``text`` the
plain-text view, ``where``
the ranks' stacks grouped, ``cause`` the root cause of a failure, ``phases``
the time-to-first-step timeline.
"""

from __future__ import annotations

from ..logbuffer import format_ranks
from .cause import Cause, user_traceback
from .core import JobMonitor
from .metrics import MetricStore
from .phases import PhaseRow, Timeline, summary, timeline, waiting_line
from .records import (
    LOG_LIMIT,
    RANK_STATES,
    CauseRow,
    Checkpoint,
    CheckpointRow,
    ErrorInfo,
    ErrorRow,
    Failure,
    FailureRow,
    JSONFloat,
    LogSummary,
    MetricRow,
    ProgressRow,
    RankJSON,
    RankRow,
    RankState,
    Series,
    Snapshot,
    latest_by_step,
    mean_by_step,
    rank_json,
)
from .text import format_text
from .usage import resource_outliers
from .where import StackGroup, Where, where_from

__all__ = [
    "LOG_LIMIT",
    "RANK_STATES",
    "Cause",
    "CauseRow",
    "Checkpoint",
    "CheckpointRow",
    "ErrorInfo",
    "ErrorRow",
    "Failure",
    "FailureRow",
    "JSONFloat",
    "JobMonitor",
    "LogSummary",
    "MetricRow",
    "MetricStore",
    "PhaseRow",
    "ProgressRow",
    "RankJSON",
    "RankRow",
    "RankState",
    "Series",
    "Snapshot",
    "StackGroup",
    "Timeline",
    "Where",
    "format_ranks",
    "format_text",
    "latest_by_step",
    "mean_by_step",
    "rank_json",
    "resource_outliers",
    "summary",
    "timeline",
    "user_traceback",
    "waiting_line",
    "where_from",
]
