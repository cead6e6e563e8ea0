"""FailureBook: what went wrong in a job, attempt by attempt (the failures part).

Owns the ranks' failures (every attempt, arrival order), the ``error``
events and their summaries, the exits torchrun's agents logged (those of the
current attempt, and every worker exit, before restarts too), the workers'
pids that name a logged exit's rank, and the causes of the attempts a restart
recovered from. Answers the root cause (:func:`~.cause.choose`) given the
ranks' states, which the rank rows own and the caller passes in; it never
touches a row. Pure; the monitor calls it under its own lock.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..events import Event
from .cause import CLASSES, Cause, LauncherExits, candidates, choose, classify_error
from .records import ErrorInfo, Failure


class FailureBook:
    """Failures, errors, logged exits and recovered causes of one job."""

    def __init__(self) -> None:
        self._failures: list[Failure] = []
        self._recovered: list[Cause] = []
        self._launcher = LauncherExits()
        self._exits: list[Failure] = []  # what the launcher said of this attempt's exits
        self._worker_exits: list[Failure] = []  # every exit it logged, restarts included
        self._pids: dict[int, tuple[int, int]] = {}  # a worker's pid: its rank and attempt
        self._errors: list[ErrorInfo] = []
        self._error_events: list[Event] = []

    # ------------------------------------------------------------------ recording

    def fail(self, failure: Failure) -> None:
        """A rank failed (its error or its exit)."""
        self._failures.append(failure)

    def error(self, info: ErrorInfo, event: Event) -> None:
        """A rank's ``error`` event (kept as a copy, for re-raising)."""
        self._errors.append(info)
        self._error_events.append(Event(event.kind, event.rank, event.t, dict(event.fields)))

    def pid(self, pid: int, rank: int, attempt: int) -> None:
        """A worker process of ``rank`` in ``attempt`` (its hello's pid)."""
        self._pids[pid] = (rank, attempt)

    def agent_line(self, source: str, text: str, t: float, attempt: int) -> bool:
        """One line of launcher agent ``source``; True when it reported an exit of ``attempt``.

        An exit of an earlier attempt chooses that attempt's recovered cause again.
        """
        exited = self._launcher.feed(source, text, t, attempt, self._pids)
        if exited is None:
            return False
        self._worker_exits.append(exited)
        if exited.attempt < attempt:
            self._recount(exited.attempt)
            return False
        self._exits.append(exited)
        return True

    def _recount(self, attempt: int) -> None:
        """Choose again the recovered cause of ``attempt`` once a late exit of it arrived."""
        for i, old in enumerate(self._recovered):
            if old.attempt == attempt:
                ended = dict.fromkeys((old.rank, *old.consequences), "Stopped")
                new = choose(self._failures, attempt, ended, self._worker_exits)
                self._recovered[i] = new or old

    def restart(self, states: Mapping[int, str], attempt: int, failed: bool) -> None:
        """The job restarts after ``attempt``: its cause (as :meth:`cause` chooses it, with
        every exit the agents logged unless it had failed) is recovered from."""
        exits = self._exits if failed else self._worker_exits
        cause = choose(self._failures, attempt, dict(states), exits, every=failed)
        if cause is not None:
            self._recovered.append(cause)
        self._exits.clear()

    def stopped(self, attempt: int) -> set[int]:
        """A stop ended ``attempt``: forget what the stop caused (signals, lost peers).

        Returns the ranks that still failed in ``attempt`` on their own.
        """
        kept = [f for f in self._failures if f.attempt != attempt or f.category in _OWN]
        self._failures = kept
        return {f.rank for f in kept if f.attempt == attempt}

    # ------------------------------------------------------------------ reading

    def cause(self, states: Mapping[int, str], attempt: int, failed: bool) -> Cause | None:
        """The root cause (see :mod:`.cause`): of ``attempt``, or over every one once failed.

        ``states``: every rank's state now. Only a failed job's cause weighs the
        launcher's exits (they pick among the ranks, never fail the job).
        """
        exits = self._exits if failed else ()
        return choose(self._failures, attempt, dict(states), exits, every=failed)

    def worst(self, attempt: int, failed: bool) -> dict[int, int]:
        """Per rank failing in ``attempt``: the index in :data:`~.cause.CLASSES` of its worst."""
        best: dict[int, int] = {}
        for f in candidates(self._failures, attempt, self._exits if failed else ()):
            best[f.rank] = min(best.get(f.rank, len(CLASSES)), CLASSES.index(f.category))
        return best

    def failures(self) -> list[Failure]:
        """Every failure so far, in arrival order (all attempts)."""
        return list(self._failures)

    def recovered(self) -> list[Cause]:
        """The causes of the attempts a restart recovered from, oldest first."""
        return list(self._recovered)

    def errors(self) -> list[ErrorInfo]:
        """Every ``error`` in arrival order."""
        return list(self._errors)

    def current_errors(self, attempt: int, stopped: bool) -> list[ErrorInfo]:
        """The errors of ``attempt``; after a stop, not those the stop caused."""
        current = [e for e in self._errors if e.attempt == attempt]
        if stopped:
            current = [e for e in current if classify_error(e.type, e.message) == "raised"]
        return current

    def error_events(self) -> list[Event]:
        """Every ``error`` event, oldest first (copies)."""
        found = sorted(self._error_events, key=lambda e: e.t)
        return [Event(e.kind, e.rank, e.t, dict(e.fields)) for e in found]

    def error_event(self, rank: int, attempt: int) -> Event | None:
        """The first ``error`` event of ``rank`` in ``attempt`` (a copy), or None."""
        for info, event in zip(self._errors, self._error_events, strict=True):
            if info.rank == rank and info.attempt == attempt:
                return Event(event.kind, event.rank, event.t, dict(event.fields))
        return None


#: Failure classes that are a rank's own doing (a stop leaves them as failures).
_OWN = ("raised", "exited")
