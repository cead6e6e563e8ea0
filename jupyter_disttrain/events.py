"""The typed event stream of a job, and parsing of the worker line protocol.

Pure: no I/O. A backend turns every line a worker prints into an
:class:`Event` with :func:`parse_line`, and reports what it sees itself
(process exits, restarts, pod phases, scheduling problems) with the
``job``/``rank``/``restart`` kinds, so the monitor and the widgets see one
ordered stream per job whatever the backend.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from .runtime.protocol import KINDS as PROTOCOL_KINDS
from .runtime.protocol import PREFIX

#: Kinds that come from workers (the line protocol) and plain log lines.
WORKER_KINDS: Final = (*PROTOCOL_KINDS, "log")
#: Kinds a backend emits from what it observes.
BACKEND_KINDS: Final = ("job", "rank", "restart")

JobState = Literal["Pending", "Running", "Restarting", "Succeeded", "Failed", "Stopped"]
JOB_STATES: Final = ("Pending", "Running", "Restarting", "Succeeded", "Failed", "Stopped")
TERMINAL_STATES: Final = frozenset({"Succeeded", "Failed", "Stopped"})


@dataclass(frozen=True)
class Event:
    """One fact about a job.

    ``kind`` is a protocol kind (``hello``, ``metric``, ``checkpoint``,
    ``result``, ``error``, ``done``), ``log`` for a plain line, or a backend
    kind: ``job`` (``state``, ``reason``, ``message``), ``rank`` (``state``,
    ``exit_code``, ``reason``, ``host``) or ``restart`` (``attempt``).
    ``rank`` is the global rank, ``None`` for job-wide events. ``t`` is the
    Unix time the fact was produced. ``fields`` holds the kind's payload.
    """

    kind: str
    rank: int | None
    t: float
    fields: dict[str, Any] = field(default_factory=dict)

    def get(self, key: str, default: Any = None) -> Any:
        """A payload field, or ``default``."""
        return self.fields.get(key, default)


def parse_line(line: str, rank: int | None, now: float | None = None) -> Event:
    """Turn one line printed by ``rank`` into an event.

    A well-formed protocol line becomes its kind; anything else, including a
    protocol line that does not decode, is a ``log`` event whose ``text`` is
    the line without its line ending. The rank written in a protocol line
    wins over ``rank`` (the source the line was read from).
    """
    text = line.rstrip("\r\n")
    stamp = time.time() if now is None else now
    start = text.find(PREFIX)
    if start != -1:
        body = _decode(text[start + len(PREFIX) :])
        if body is not None:
            kind = body.pop("kind")
            body.pop("v", None)
            src = body.pop("rank", rank)
            t = body.pop("t", stamp)
            return Event(
                kind,
                src if isinstance(src, int) else rank,
                float(t) if isinstance(t, int | float) else stamp,
                body,
            )
    return Event("log", rank, stamp, {"text": text})


def _decode(payload: str) -> dict[str, Any] | None:
    try:
        body = json.loads(payload)
    except ValueError:
        return None
    if not isinstance(body, dict) or body.get("kind") not in PROTOCOL_KINDS:
        return None
    return body


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
) -> Event:
    """A per-rank fact observed by the backend (``Pending``, ``Running``, ``Exited``...)."""
    return Event(
        "rank",
        rank,
        time.time() if t is None else t,
        {"state": state, "exit_code": exit_code, "reason": reason, "host": host, "node": node},
    )


def restart_event(attempt: int, reason: str = "", t: float | None = None) -> Event:
    """The backend restarted the workers (``attempt`` counts from 1)."""
    return Event(
        "restart", None, time.time() if t is None else t, {"attempt": attempt, "reason": reason}
    )


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
