"""Ranks pausing and resuming, told to the Debugger panel as DAP events.

A :class:`Watcher` thread looks at the bridge's live jobs' paused ranks
(the monitor's, from signed ``paused`` lines) every :data:`POLL` seconds while
the kernel's debugger is on, and sends ``stopped`` when a rank stops (again:
a step ends in a new ``paused`` line) and ``continued`` when it runs on.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final, Protocol

from . import ids

if TYPE_CHECKING:
    from ..monitor.paused import PausedRank


class PausingJob(Protocol):
    """A job as the watcher reads it: its paused ranks."""

    def paused(self) -> list[PausedRank]: ...


class WatchedBridge(Protocol):
    """What the watcher needs of its :class:`~.bridge.RankBridge`."""

    debugger: Any

    def live(self) -> Sequence[tuple[int, PausingJob]]: ...
    def sync_later(self, job: Any, rank: int) -> None: ...


POLL: Final = 0.1
#: Event numbers, far from debugpy's own.
_SEQ = itertools.count(1 << 30)


def stopped_event(thread: int, reason: str, text: str) -> dict[str, Any]:
    """A DAP ``stopped`` event for one rank thread (the others run on)."""
    return {
        "type": "event",
        "seq": next(_SEQ),
        "event": "stopped",
        "body": {
            "reason": reason,
            "threadId": thread,
            "allThreadsStopped": False,
            "preserveFocusHint": False,
            "description": text,
            "text": text,
        },
    }


def continued_event(thread: int) -> dict[str, Any]:
    """A DAP ``continued`` event for one rank thread."""
    return {
        "type": "event",
        "seq": next(_SEQ),
        "event": "continued",
        "body": {"threadId": thread, "allThreadsContinued": False},
    }


class Watcher:
    """The thread that turns paused ranks into events (sent with the debugger's callback)."""

    def __init__(self, bridge: WatchedBridge) -> None:
        self.bridge = bridge
        self.lock = threading.Lock()
        self.seen: dict[int, tuple[float, int]] = {}  # thread id -> (paused line's t, line)
        self.steps: set[int] = set()
        self.counts: dict[int, int] = {}  # thread id -> stops seen
        self.halt = threading.Event()
        self.thread = threading.Thread(target=self._run, name="distrain-dap-watch", daemon=True)

    def start(self) -> None:
        """Start watching (once)."""
        if not self.thread.is_alive():
            self.thread.start()

    def stop(self) -> None:
        """Stop watching."""
        self.halt.set()

    def stopped_threads(self) -> list[int]:
        """The rank threads stopped now."""
        with self.lock:
            return sorted(self.seen)

    def stops(self, thread: int) -> int:
        """How many stops of ``thread`` were seen (its frames' ids change with each)."""
        with self.lock:
            return self.counts.get(thread, 0)

    def stepping(self, thread: int) -> None:
        """``thread`` was told to step: its next stop is a ``step``. No ``continued`` is sent
        (the request implies it, and JupyterLab would clear the panel until the stop)."""
        with self.lock:
            self.steps.add(thread)

    def focus(self, thread: int) -> None:
        """Make stopped ``thread`` the one the panel shows (JupyterLab's panel shows the thread
        of the last ``stopped`` event): tell its stop again."""
        with self.lock:
            if thread not in self.seen:
                raise ValueError(f"thread {thread} is not stopped")
        self.bridge.debugger.event_callback(
            stopped_event(thread, "pause", "shown in the Debugger panel")
        )

    def _run(self) -> None:
        while not self.halt.wait(POLL):
            if getattr(self.bridge.debugger, "is_started", False):
                for event in self.check():
                    self.bridge.debugger.event_callback(event)

    def check(self) -> list[dict[str, Any]]:
        """The events since the last look (and remember what was seen)."""
        now: dict[int, tuple[float, int, str, str]] = {}
        for slot, job in self.bridge.live():
            for paused in job.paused():
                if self.seen.get(ids.thread_id(slot, paused.rank)) is None:
                    self.bridge.sync_later(job, paused.rank)  # breakpoints set while it ran
                reason = "exception" if paused.exception else "breakpoint"
                reason = "pause" if paused.asked else reason
                now[ids.thread_id(slot, paused.rank)] = (
                    paused.t,
                    paused.line,
                    reason,
                    paused.sentence(),
                )
        events = []
        with self.lock:
            for thread, (t, line, reason, text) in sorted(now.items()):
                if self.seen.get(thread) != (t, line):
                    self.counts[thread] = self.counts.get(thread, 0) + 1
                    if thread in self.steps:
                        reason = "step"
                        self.steps.discard(thread)
                    events.append(stopped_event(thread, reason, text))
            for thread in sorted(set(self.seen) - set(now)):
                self.steps.discard(thread)
                events.append(continued_event(thread))
            self.seen = {thread: (v[0], v[1]) for thread, v in now.items()}
        return events
