"""From a line a job's stream carries to its event: the one path every backend uses.

A backend reads its workers' output wherever it lands (a local log file, a
pod's log, a subprocess's pipe) and hands each line here. Control lines
become events only when signed with the job's key and fitting the job
(:func:`..events.parse_line`); anything else is ``log`` text of the stream. A line
rank 0 wrote for many other ranks' lines becomes their events.
"""

from __future__ import annotations

from .. import events as ev
from ..runtime import rankprefix

__all__ = ["line_events"]


def line_events(
    line: str | bytes,
    rank: int | None,
    trust: ev.Trust | None,
    *,
    source: str = "",
    prefixed: bool = False,
    now: float | None = None,
) -> list[ev.Event]:
    """The events of one ``line`` read from ``rank``'s stream (None: a stream of no rank):
    one, or each line a ``relayed`` line of rank 0 carries (:func:`..events.unpacked`).

    ``prefixed``: several ranks share the stream and each line starts with its
    rank's ``[rank R]`` prefix (:mod:`..runtime.rankprefix`), which then names
    the rank. ``source`` names a stream of no rank (an agent's log, a pod) on the
    log text it carries. Bytes are read as UTF-8 (undecodable bytes replaced).
    Never raises for what the line holds.
    """
    text = line.decode("utf-8", "replace") if isinstance(line, bytes) else line
    if prefixed:
        rank, text = rankprefix.split(text)
    event = ev.parse_line(text, rank, now, trust=trust)
    if rank is None and source and event.kind == "log":
        event.fields["source"] = source
    return ev.unpacked(event)
