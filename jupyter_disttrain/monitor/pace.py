"""Pace: how fast each rank steps and whether it still does (the rates part of the monitor).

Owns, per rank, the recent ``(t, step)`` points of its metrics (within
``rate_window`` seconds), and job-wide the first metric and the frontier (the
highest step and when it arrived). Answers: a rank's step rate, whether a
rank stalled, the overall steps/s and the frontier step. Pure; the monitor
calls it under its own lock.
"""

from __future__ import annotations

from collections import deque

#: A rank whose last metric is older than this many of its own intervals (and at least
#: STALL_MIN_S seconds) reads as stalled: its steps/s is not shown as current.
STALL_INTERVALS = 3.0
STALL_MIN_S = 2.0
#: A rate is measured over at least this many seconds: steps a few milliseconds apart (a
#: short job's whole run) give a number that says nothing of its speed.
MIN_RATE_SPAN_S = 0.5
#: Recent points kept per rank.
_KEPT = 1024


class Pace:
    """The step points of the ranks' metrics and what they say about speed."""

    def __init__(self, rate_window: float = 30.0) -> None:
        self.rate_window = rate_window
        self._recent: dict[int, deque[tuple[float, int]]] = {}
        self._first: tuple[float, int] | None = None
        self._frontier: tuple[float, int] | None = None

    def track(self, rank: int, step: int, t: float) -> float | None:
        """Note ``rank`` at ``step`` at ``t``; its steps/s over the window (None without two
        points :data:`MIN_RATE_SPAN_S` apart)."""
        recent = self._recent.get(rank)
        if recent is None or (recent and step < recent[-1][1]):
            recent = self._recent[rank] = deque(maxlen=_KEPT)
        recent.append((t, step))
        while len(recent) > 2 and t - recent[1][0] >= self.rate_window:
            recent.popleft()
        if self._first is None:
            self._first = (t, step)
        if self._frontier is None or step > self._frontier[1]:
            self._frontier = (t, step)
        t0, s0 = recent[0]
        return (step - s0) / (t - t0) if t - t0 >= MIN_RATE_SPAN_S and step >= s0 else None

    def forget(self, rank: int) -> None:
        """``rank`` started again (a new process): its rate starts afresh."""
        self._recent.pop(rank, None)

    def restart(self) -> None:
        """The job restarted: every rate starts afresh (the first point and frontier stay)."""
        self._recent.clear()

    @property
    def frontier(self) -> int | None:
        """The highest step any rank reported."""
        return None if self._frontier is None else self._frontier[1]

    def overall(self) -> float | None:
        """(highest step - first step) / time between those metrics; None before two steps
        :data:`MIN_RATE_SPAN_S` apart."""
        if self._first is None or self._frontier is None:
            return None
        (t0, s0), (t1, s1) = self._first, self._frontier
        return (s1 - s0) / (t1 - t0) if t1 - t0 >= MIN_RATE_SPAN_S and s1 > s0 else None

    def stalled(self, rank: int, now: float) -> bool:
        """No metric from ``rank`` for longer than :data:`STALL_INTERVALS` of its intervals."""
        recent = self._recent.get(rank)
        return recent is not None and _stalled(recent, now)

    def stalled_ranks(self, now: float) -> frozenset[int]:
        """The ranks :meth:`stalled` at ``now`` (one pass, for a whole snapshot)."""
        return frozenset(rank for rank, recent in self._recent.items() if _stalled(recent, now))

    def all_stalled(self, at: float) -> bool:
        """Some rank has a rate, and every rank with one had stalled by ``at``."""
        rated = [rank for rank, recent in self._recent.items() if len(recent) >= 2]
        return bool(rated) and all(self.stalled(rank, at) for rank in rated)


def _stalled(recent: deque[tuple[float, int]], now: float) -> bool:
    if len(recent) < 2:
        return False
    (t0, _), (t1, _) = recent[0], recent[-1]
    interval = (t1 - t0) / (len(recent) - 1)
    return now - t1 > max(STALL_INTERVALS * interval, STALL_MIN_S)
