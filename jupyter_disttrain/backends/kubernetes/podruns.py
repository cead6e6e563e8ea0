"""What a pod's successive objects tell of its runs: their ends, restarts, rank states."""

from __future__ import annotations

import threading
from typing import Any

from ... import events as ev
from .status import PodFacts, previous_run, rank_events

#: What the pods' watch last saw of a pod: (state, restarts, reason).
Seen = tuple[str, int, str]


def seen(facts: PodFacts) -> Seen:
    """What the watch keeps of ``facts``: a pod whose :data:`Seen` is unchanged tells no
    new rank state."""
    return (facts.state, facts.restarts, facts.reason)


class PodRuns:
    """The runs of each pod whose end was told. Thread-safe."""

    def __init__(self, container: str, nproc: int) -> None:
        self.container = container
        self.nproc = nproc
        self._lock = threading.Lock()
        self._ends: dict[str, set[str]] = {}  # pod -> the runs whose end was told

    def told(
        self, pod: dict[str, Any], facts: PodFacts, previous: Seen | None
    ) -> tuple[list[ev.Event], bool]:
        """The events the pod's new object tells, in order, and whether a run they tell
        of failed (its log says why).

        In order: the end of a run that ended between two reads of the pod (its next
        run had started: only ``lastState`` says it), the restart, the ranks' new state
        (when it differs from ``previous``, what was seen before; None: first seen).
        """
        before = previous_run(pod, self.container, facts)
        with self._lock:
            ends = self._ends.setdefault(facts.name, set())
            unseen = before is not None and before.ended not in ends
            ends.update(run.ended for run in (facts, before) if run is not None and run.ended)
        missed = before if unseen and previous is not None else None
        told = [] if missed is None else rank_events(missed, self.nproc)
        failed = missed is not None and missed.state == "Failed"
        if previous is not None and previous[1] < facts.restarts:
            told.append(ev.restart_event(facts.restarts, f"{facts.name} restarted"))
        if previous != seen(facts):
            told += rank_events(facts, self.nproc)
            failed = failed or facts.state == "Failed"
        return told, failed
