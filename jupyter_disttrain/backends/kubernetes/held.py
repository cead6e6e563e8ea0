"""A pod's events held back while its log is read, then delivered in their order.

A failed pod's log holds its rank's own words (a signed error line), its status only an
exit code. The pods' watch holds the failed pod's events (:meth:`HeldEvents.hold`) until
the log's lines are delivered (:meth:`HeldEvents.release`), so the monitor hears a rank's
error before its exit code: the first view of a failed job names the error. Events of that
pod's later states (its restart, its next run) wait behind them.
"""

from __future__ import annotations

import threading

from ... import events as ev
from ..base import EventSink


class HeldEvents:
    """Events per pod: delivered to ``sink`` at once, or after those held before them.

    Holds count: each :meth:`hold` is ended by one :meth:`release`, and a pod's events
    wait while any hold of it lasts (two runs' logs read at once). Thread-safe; ``sink``
    is called without the lock held, by one thread at a time per pod, in the pod's order.
    """

    def __init__(self, sink: EventSink) -> None:
        self._sink = sink
        self._lock = threading.Lock()
        self._queued: dict[str, list[ev.Event]] = {}  # pods whose events wait or are delivered
        self._holds: dict[str, int] = {}
        self._draining: set[str] = set()

    def hold(self, pod: str) -> None:
        """Hold ``pod``'s events from now until the matching :meth:`release`."""
        with self._lock:
            self._holds[pod] = self._holds.get(pod, 0) + 1
            self._queued.setdefault(pod, [])

    def tell(self, pod: str, events: list[ev.Event]) -> None:
        """Deliver ``pod``'s ``events`` now, or after those held (see :meth:`hold`)."""
        with self._lock:
            queued = self._queued.get(pod)
            if queued is not None:
                queued.extend(events)
                return
        for event in events:
            self._sink(event)

    def release(self, pod: str) -> None:
        """End one hold of ``pod``; once none is left, deliver its queued events in order
        (with any told meanwhile)."""
        with self._lock:
            left = self._holds.get(pod, 0) - 1
            if left > 0:
                self._holds[pod] = left
                return
            self._holds.pop(pod, None)
            if pod in self._draining:
                return  # the thread delivering them goes on with what is queued
            self._draining.add(pod)
        try:
            self._drain(pod)
        except BaseException:
            with self._lock:
                self._draining.discard(pod)
            raise

    def _drain(self, pod: str) -> None:
        """Deliver ``pod``'s queued events until none is left or it is held again; ends
        its draining in the same locked step that finds that (a release in between would
        otherwise leave the events queued)."""
        while True:
            with self._lock:
                events, held = self._queued.get(pod) or [], pod in self._holds
                if held or not events:
                    if not held:
                        self._queued.pop(pod, None)
                    self._draining.discard(pod)
                    return  # held again: that hold's release delivers them
                self._queued[pod] = []
            for event in events:
                self._sink(event)
