"""What a rank's log line shows someone reading the job's logs.

The job's own control lines are not output and are left out, except a rank's
own error: it is shown as the traceback the rank would have printed, so a job that
failed before printing anything still has its failure in its logs. An error
line is believed only when it is signed with the job's key and fits the job
(:func:`..events.parse_line`); printed look-alikes stay as they were printed.
"""

from __future__ import annotations

from .. import events as ev
from ..runtime.protocol import is_signed

__all__ = ["error_trace", "relayed_error", "shown_lines"]


def shown_lines(line: str, rank: int | None, trust: ev.Trust | None) -> list[str]:
    """The lines ``line`` of ``rank``'s log shows: itself, none, or a rank's traceback."""
    if trust is None or not is_signed(line, trust.signer):
        return [line]
    if '"kind":"error"' not in line:
        return []  # the job's own control line (metrics, progress, ...)
    event = ev.parse_line(line, rank, trust=trust)
    if event.kind != "error" or event.rank != rank:
        return []  # not believed, or another rank's error relayed through this stream
    return error_trace(event)


def error_trace(event: ev.Event) -> list[str]:
    """The lines of an error event's traceback (its type and message when it has none)."""
    trace = str(event.get("traceback") or "").rstrip("\n")
    if not trace:
        trace = f"{event.get('type') or 'Error'}: {event.get('message') or ''}"
    return trace.splitlines()


def relayed_error(line: str, trust: ev.Trust | None) -> tuple[int, list[str]] | None:
    """Another rank's error that rank 0 relayed (``line`` read from rank 0's stream): that
    rank and its traceback lines, or None when ``line`` is no such believed error."""
    if trust is None or '"kind":"error"' not in line or not is_signed(line, trust.signer):
        return None
    event = ev.parse_line(line, 0, trust=trust)
    if event.kind != "error" or event.rank is None or event.rank == 0:
        return None
    return event.rank, error_trace(event)
