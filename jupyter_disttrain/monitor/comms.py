"""CommsReader: the NCCL / c10d / gloo reading of a job's log lines (the comms part).

Owns the communication parser every log line goes through, the count of
lines it read (its summary is cached until another line arrives) and the
rendezvous name the launchers could not resolve. Pure; the monitor calls it
under its own lock.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..nccl import NcclParser, NcclSummary
from .network import Unresolved
from .records import RankState


class CommsReader:
    """The communication reading of every log line received so far."""

    def __init__(self) -> None:
        self._parser = NcclParser()
        self._names = Unresolved()
        self._lines = 0
        self._summary: tuple[int, NcclSummary] | None = None

    def feed(self, text: str, rank: int | None) -> None:
        """One log line (``rank`` None: job-wide)."""
        self._parser.feed(text, rank)
        self._names.feed(text)
        self._lines += 1

    @property
    def lines(self) -> int:
        """Log lines read so far."""
        return self._lines

    def summary(self) -> NcclSummary:
        """The parser's summary, computed again only after new lines."""
        cached = self._summary
        if cached is None or cached[0] != self._lines:
            cached = self._summary = (self._lines, self._parser.summary())
        return cached[1]

    def unresolved(self, rows: Mapping[int, RankState]) -> str | None:
        """The sentence naming a rendezvous address no launcher could resolve, or None."""
        return self._names.sentence(rows)
