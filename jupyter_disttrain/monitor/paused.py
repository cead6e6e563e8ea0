"""Ranks stopped in the debugger: where each is and how to reach it (from ``paused`` lines).

Pure: :class:`PauseBook` is kept by :class:`~.state.JobBook`, under the
monitor's lock. A ``paused`` line makes its rank ``Paused`` and the other running ranks
read "waiting for rank R (paused)" (in a collective they wait for it); a
``resumed`` line, or the rank's end, undoes that.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from ..events import RAISED, Event
from .records import RankState, as_int, as_str

#: The state of a rank stopped in the debugger (one of :data:`~.records.RANK_STATES`).
PAUSED: Final = "Paused"


@dataclass(frozen=True)
class PausedRank:
    """Where a paused rank stopped: ``file:line`` in ``function``; ``port`` on its host (or
    pod, ``node``) reaches its debugger; ``exception`` is set for a post-mortem stop."""

    rank: int
    file: str
    line: int
    function: str
    port: int
    pid: int | None
    node: int
    t: float
    exception: str = ""
    asked: bool = False  # paused on the notebook's request (not at a breakpoint)

    @property
    def place(self) -> str:
        """``file:line`` with a cell shown as ``cell``."""
        name = "cell" if self.file.startswith("<distrain-cell") else self.file
        return f"{name}:{self.line}"

    def sentence(self) -> str:
        """``rank 1 paused at cell:12 in train`` (with the exception of a post-mortem)."""
        text = f"rank {self.rank} paused at {self.place} in {self.function}"
        return f"{text} after {self.exception}" if self.exception else text

    def to_json(self) -> dict[str, Any]:
        """A JSON-able copy (for the dashboard)."""
        return {
            "rank": self.rank,
            "file": self.file,
            "line": self.line,
            "function": self.function,
            "place": self.place,
            "exception": self.exception,
            "asked": self.asked,
            "sentence": self.sentence(),
        }


def waiting_reason(rank: int) -> str:
    """The reason a running rank shows while ``rank`` is paused."""
    return f"waiting for rank {rank} (paused)"


class PauseBook:
    """The paused ranks of one job (updated under the monitor's lock)."""

    def __init__(self) -> None:
        self._paused: dict[int, PausedRank] = {}

    def pause(self, ev: Event, row: RankState, rows: dict[int, RankState]) -> None:
        """Apply a ``paused`` line of ``row``'s rank."""
        port = as_int(ev.get("port"))
        if port is None:
            return
        self._paused[row.rank] = PausedRank(
            row.rank,
            as_str(ev.get("file")),
            as_int(ev.get("line")) or 0,
            as_str(ev.get("function")),
            port,
            as_int(ev.get("pid")),
            row.node,
            ev.t,
            as_str(ev.get("exception")),
            ev.get("reason") == "pause",
        )
        if row.state in ("Running", "Pending", "Ready", RAISED, PAUSED):  # Raised: --last
            row.state = PAUSED
            row.reason = self._paused[row.rank].sentence()
        for other in rows.values():
            self.note(other)

    @property
    def active(self) -> bool:
        """True while a rank is paused."""
        return bool(self._paused)

    def note(self, row: RankState) -> None:
        """A running rank reads as waiting for the (first) paused rank."""
        if self._paused and row.rank not in self._paused and row.state == "Running":
            if not row.reason:
                row.reason = waiting_reason(min(self._paused))

    def resume(self, row: RankState, rows: dict[int, RankState]) -> None:
        """Apply a ``resumed`` line (or the end) of ``row``'s rank."""
        if self._paused.pop(row.rank, None) is None:
            return
        if row.state == PAUSED:
            row.state = "Running"
            row.reason = ""
        for other in rows.values():
            if other.reason == waiting_reason(row.rank):
                other.reason = ""
                self.note(other)

    def ranks(self, rows: dict[int, RankState]) -> list[PausedRank]:
        """The ranks paused now (rank order): a rank that ended since is not."""
        return [p for r, p in sorted(self._paused.items()) if r in rows and rows[r].state == PAUSED]

    def clear(self) -> None:
        """Forget every pause (the workers restarted)."""
        self._paused.clear()
