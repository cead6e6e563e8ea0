"""Bounded per-rank log storage with folding of lines repeated across ranks.

Pure and not thread-safe on its own (:class:`~jupyter_disttrain.monitor.JobMonitor`
guards it with its lock). Memory is bounded whatever the line rate: each rank
keeps its last ``limit`` lines (older ones are dropped and counted) and each
line is cut to ``max_chars`` characters.

Carriage returns read as a terminal shows them (:mod:`.terminal`): a line keeps
the text after its last ``\r``, and a line that starts with one (a progress
bar's redraw) takes the place of the rank's line before it when that was a
redraw too, so a bar redrawn a thousand times is one line, not a thousand.
"""

from __future__ import annotations

import heapq
import re
from collections import deque
from collections.abc import Callable, Iterable
from typing import NamedTuple

from .terminal import redraws, shown

__all__ = ["JOB_RANK", "Divergence", "FoldedLine", "LogBuffer", "LogLine", "format_ranks"]

#: Pseudo-rank of job-wide lines (a backend's own messages, lines without a rank).
JOB_RANK = -1
#: Marker appended to a line cut at ``max_chars``.
ELLIPSIS = " [...]"


class LogLine(NamedTuple):
    """One stored line.

    ``seq`` orders all lines of the buffer by arrival; ``n`` is the line's
    number within its rank counting dropped lines, so equal ``n`` means the
    same position in two ranks' output.
    """

    seq: int
    rank: int
    n: int
    t: float
    text: str


class FoldedLine(NamedTuple):
    """Identical lines from several ranks shown as one entry.

    ``seq`` and ``t`` are those of the first member; ``ranks`` is sorted.
    """

    seq: int
    t: float
    ranks: tuple[int, ...]
    text: str

    def label(self) -> str:
        """``[ranks 0-7] text``, ``[rank 3] text`` or ``[job] text``."""
        return f"[{rank_label(self.ranks)}] {self.text}"


class Divergence(NamedTuple):
    """Where the ranks' output first differs.

    ``n`` is the per-rank line number (see :attr:`LogLine.n`), ``seq`` the
    arrival sequence number of the earliest of those lines (to scroll a
    merged view to), ``texts`` the line each rank has there.
    """

    n: int
    seq: int
    texts: dict[int, str]


def format_ranks(ranks: Iterable[int], sep: str = ",") -> str:
    """Compact rank list: ``[0, 1, 2, 3, 5] -> "0-3,5"`` (sorted, duplicates dropped; the
    ranges joined with ``sep``)."""
    parts: list[str] = []
    ordered = sorted(set(ranks))
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        parts.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return sep.join(parts)


def rank_label(ranks: tuple[int, ...]) -> str:
    """``ranks 0-3,5``, ``rank 3`` or ``job`` for :data:`JOB_RANK`."""
    if ranks == (JOB_RANK,):
        return "job"
    if len(ranks) == 1:
        return f"rank {ranks[0]}"
    return f"ranks {format_ranks(ranks)}"


Search = str | re.Pattern[str] | None


#: Storage form of a line: (seq, rank, n, t, text), the fields of :class:`LogLine`.
_Row = tuple[int, int, int, float, str]


class LogBuffer:
    """Per-rank ring buffers of log lines.

    ``limit`` lines are kept per rank (``deque(maxlen=limit)``); longer lines
    than ``max_chars`` are cut and end with ``" [...]"``. :attr:`dropped`
    counts the lines pushed out of the buffers.
    """

    def __init__(self, limit: int = 2000, *, max_chars: int = 4000) -> None:
        if limit < 1 or max_chars < 1:
            raise ValueError("limit and max_chars must be positive")
        self.limit = limit
        self.max_chars = max_chars
        # Plain tuples, not LogLine: the collector stops tracking tuples of
        # atomic values, so a full buffer costs full garbage collections nothing.
        self._lines: dict[int, deque[_Row]] = {}
        self._counts: dict[int, int] = {}
        self._seq = 0
        self._dropped = 0
        self._redrawn: dict[int, int] = {}  # rank -> seq of its last line, a redraw

    def append(self, rank: int, t: float, text: str) -> LogLine:
        """Store one line of ``rank`` (use :data:`JOB_RANK` for job-wide lines) as a
        terminal shows it (see the module's note on ``\\r``); a redraw that follows a
        redraw takes its place and number, with a new ``seq``."""
        redraw = redraws(text)
        text = shown(text)
        if len(text) > self.max_chars:
            text = text[: self.max_chars] + ELLIPSIS
        lines = self._lines.get(rank)
        if lines is None:
            lines = self._lines[rank] = deque(maxlen=self.limit)
        if redraw and lines and self._redrawn.get(rank) == lines[-1][0]:
            n = lines.pop()[2]
        else:
            if len(lines) == self.limit:
                self._dropped += 1
            n = self._counts.get(rank, 0)
            self._counts[rank] = n + 1
        row = (self._seq, rank, n, t, text)
        self._seq += 1
        lines.append(row)
        if redraw:
            self._redrawn[rank] = row[0]
        return LogLine._make(row)

    @property
    def dropped(self) -> int:
        """Lines dropped from full buffers so far (all ranks)."""
        return self._dropped

    @property
    def total(self) -> int:
        """Lines ever appended (kept or dropped)."""
        return self._seq

    def __len__(self) -> int:
        """Lines currently kept."""
        return sum(len(lines) for lines in self._lines.values())

    def ranks(self) -> list[int]:
        """Ranks that have printed, sorted (:data:`JOB_RANK` first)."""
        return sorted(self._lines)

    def dropped_for(self, rank: int) -> int:
        """Lines of ``rank`` no longer kept."""
        lines = self._lines.get(rank)
        return 0 if lines is None else self._counts[rank] - len(lines)

    def lines(
        self,
        ranks: Iterable[int] | None = None,
        search: Search = None,
        limit: int | None = None,
        since: int | None = None,
    ) -> list[LogLine]:
        """Kept lines in arrival order.

        ``ranks`` selects ranks (all when ``None``); ``search`` keeps lines
        containing a string (case-insensitive) or matching a compiled regular
        expression; ``since`` keeps lines with ``seq > since`` (incremental
        reads); ``limit`` keeps the last ``limit`` matches.
        """
        match = _matcher(search)
        newest_first = heapq.merge(
            *(reversed(self._lines[r]) for r in self._select(ranks)), key=_minus_seq
        )
        out: list[LogLine] = []
        for row in newest_first:
            if since is not None and row[0] <= since:
                break
            if match is None or match(row[4]):
                out.append(LogLine._make(row))
                if limit is not None and len(out) >= limit:
                    break
        out.reverse()
        return out

    def folded(
        self,
        ranks: Iterable[int] | None = None,
        search: Search = None,
        limit: int | None = None,
        *,
        window: int = 256,
    ) -> list[FoldedLine]:
        """Lines in arrival order with identical lines of different ranks folded.

        A line joins the earliest entry with the same text that does not yet
        hold its rank and started at most ``window`` lines earlier (in the
        selected lines); otherwise it starts a new entry. So when 8 ranks
        print ``Epoch 3 done`` at about the same time, interleaved with other
        output, one entry ``[ranks 0-7] Epoch 3 done`` results. Entries are
        ordered by their first line; job-wide lines never fold with ranks.
        With ``limit``, only the last ``limit * ranks + window`` lines are
        folded (bounded work) and the last ``limit`` entries returned.
        """
        selected = self._select(ranks)
        span = None if limit is None else limit * max(1, len(selected)) + window
        source = self.lines(selected, search, span)
        entries: list[list[LogLine]] = []
        starts: list[int] = []  # position in ``source`` of each entry's first line
        members: list[set[int]] = []
        open_by_text: dict[tuple[bool, str], deque[int]] = {}
        for pos, line in enumerate(source):
            key = (line.rank == JOB_RANK, line.text)
            candidates = open_by_text.get(key)
            target = None
            if candidates is not None:
                while candidates and pos - starts[candidates[0]] > window:
                    candidates.popleft()
                for e in candidates:
                    if line.rank not in members[e]:
                        target = e
                        break
            if target is None:
                target = len(entries)
                entries.append([])
                starts.append(pos)
                members.append(set())
                open_by_text.setdefault(key, deque()).append(target)
            entries[target].append(line)
            members[target].add(line.rank)
        folded = [
            FoldedLine(group[0].seq, group[0].t, tuple(sorted(members[i])), group[0].text)
            for i, group in enumerate(entries)
        ]
        return folded if limit is None else folded[-limit:] if limit > 0 else []

    def first_divergence(
        self, ranks: Iterable[int] | None = None, key: Callable[[str], str] | None = None
    ) -> Divergence | None:
        """The first line number at which two ranks' kept lines differ.

        Lines are compared by per-rank line number :attr:`LogLine.n` (so drops
        do not misalign ranks), through ``key`` if given (e.g. to mask
        numbers). Only ranks that still hold line ``n`` take part; a rank
        that printed fewer lines is behind, not divergent. Job-wide lines are
        ignored. ``None`` when the ranks agree everywhere they overlap.
        """
        held = {
            r: [LogLine._make(row) for row in self._lines[r]]
            for r in self._select(ranks)
            if r != JOB_RANK
        }
        if len(held) < 2:
            return None
        first = min(lines[0].n for lines in held.values() if lines)
        last = max(lines[-1].n for lines in held.values() if lines)
        for n in range(first, last + 1):
            present = [
                lines[n - lines[0].n]
                for lines in held.values()
                if lines and lines[0].n <= n <= lines[-1].n
            ]
            if len(present) < 2:
                continue
            texts = {line.rank: line.text for line in present}
            keys = {line.text if key is None else key(line.text) for line in present}
            if len(keys) > 1:
                return Divergence(n, min(line.seq for line in present), texts)
        return None

    def _select(self, ranks: Iterable[int] | None) -> list[int]:
        if ranks is None:
            return sorted(self._lines)
        return sorted({r for r in ranks if r in self._lines})


def _minus_seq(row: _Row) -> int:
    return -row[0]


def _matcher(search: Search) -> Callable[[str], bool] | None:
    if search is None or search == "":
        return None
    if isinstance(search, str):
        needle = search.casefold()
        return lambda text: needle in text.casefold()
    pattern = search
    return lambda text: pattern.search(text) is not None
