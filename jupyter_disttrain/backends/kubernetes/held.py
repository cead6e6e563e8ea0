"""A pod's rank events held back while its log is read, then delivered in their order.

A failed pod's log holds its rank's own words (a signed error line), its status only an
exit code. The pods' watch holds the failed pod's rank events (:meth:`HeldEvents.hold`)
until the log's lines are delivered (:meth:`HeldEvents.release`), so the monitor hears a
rank's error before its exit code: the first view of a failed job names the error. Events
of that pod's later states (a restart) wait behind them.
"""

from __future__ import annotations

import threading

from ... import events as ev
from ..base import EventSink


class HeldEvents:
    """Rank events per pod: delivered to ``sink`` at once, or after those held before them.

    Thread-safe; ``sink`` is called without the lock held, in each pod's order.
    """

    def __init__(self, sink: EventSink) -> None:
        self._sink = sink
        self._lock = threading.Lock()
        self._held: dict[str, list[ev.Event]] = {}

    def hold(self, pod: str) -> None:
        """Hold ``pod``'s events from now until :meth:`release`."""
        with self._lock:
            self._held.setdefault(pod, [])

    def tell(self, pod: str, events: list[ev.Event]) -> None:
        """Deliver ``pod``'s ``events`` now, or after those held (see :meth:`hold`)."""
        with self._lock:
            held = self._held.get(pod)
            if held is not None:
                held.extend(events)
                return
        for event in events:
            self._sink(event)

    def release(self, pod: str) -> None:
        """Deliver ``pod``'s held events in order (with any added meanwhile); hold no more."""
        while True:
            with self._lock:
                events = self._held.get(pod) or []
                if not events:
                    self._held.pop(pod, None)
                    return
                self._held[pod] = []
            for event in events:
                self._sink(event)
