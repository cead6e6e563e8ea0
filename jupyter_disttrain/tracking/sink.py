"""A sink: one job's events written somewhere else, on a thread of its own.

The listener (:meth:`Sink.on_event`) only queues the event, so a slow
store never slows the backend's reader or the monitor; the sink's thread
takes what was queued a few times a second, in batches. It keeps one
copy of each worker line (rank 0 relays other ranks' lines, as the
monitor knows), flushes every :attr:`Sink.flush_every` seconds and
finishes at the job's first terminal state. A sink that fails says so once,
as a warning in the job's output, and drops the rest; the job goes on.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from typing import Final

from ..events import TERMINAL_STATES, Event, FirstCopies

Feed = Callable[[Event], None]

#: Protocol kinds whose repeated worker lines are dropped (see :class:`~..events.FirstCopies`).
_DEDUPED: Final = frozenset({"metric", "checkpoint"})
#: Lines remembered for that (the oldest are forgotten first).
MAX_SEEN: Final = 200_000
#: Seconds :meth:`Sink.close` waits by default for the end to be written.
CLOSE_WAIT: Final = 30.0


class SinkError(RuntimeError):
    """A sink cannot write; the message says why (shown as the sink's one warning)."""


class _Stop:
    """Queued by :meth:`Sink.cancel`: finish now, the job state unknown."""


class Sink:
    """Writes one job's events on its own thread (subclasses say where).

    ``feed`` takes the sink's warning back into the job (a job-wide ``log``
    event ``warning: ...`` with ``source`` :attr:`name`), so it shows above the
    job in every view. Subclasses implement :meth:`handle` (one fresh event),
    :meth:`flush` and :meth:`finish` (the final state, or None when cancelled);
    an exception from any of them ends the sink with one warning, then
    :meth:`abandon`.
    """

    name = "sink"
    flush_every = 2.0
    #: Seconds the thread sleeps between batches: it takes what was queued meanwhile in one
    #: go rather than waking for each event (which would take the GIL from the reader).
    batch_every = 0.25

    def __init__(self, job: str, feed: Feed) -> None:
        self.job = job
        self._feed = feed
        self._queue: queue.SimpleQueue[Event | _Stop] = queue.SimpleQueue()
        self._copies = FirstCopies(_DEDUPED, MAX_SEEN)
        self._off = False
        self._done = threading.Event()
        self._wake = threading.Event()
        self.warnings: list[str] = []
        self.cpu_seconds = 0.0  # the thread's CPU time, once finished
        self._thread = threading.Thread(target=self._run, name=f"distrain-{self.name}", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------ the job's side

    def on_event(self, event: Event) -> None:
        """Queue one event (the job's listener; never blocks, wakes the thread only at the end)."""
        if self._off:
            return
        self._queue.put(event)
        if event.kind == "job" and event.fields.get("state") in TERMINAL_STATES:
            self._wake.set()

    def close(self, timeout: float = CLOSE_WAIT) -> bool:
        """Wait up to ``timeout`` s for the sink to finish; True when it has."""
        return self._done.wait(timeout)

    def cancel(self, timeout: float = CLOSE_WAIT) -> None:
        """Finish now with the job state unknown (the job never started, or is left)."""
        self._queue.put(_Stop())
        self._wake.set()
        self._done.wait(timeout)

    @property
    def finished(self) -> bool:
        """True once the sink wrote the end (or gave up)."""
        return self._done.is_set()

    # ------------------------------------------------------------------ for subclasses

    def handle(self, event: Event) -> None:
        """Take one fresh event (not a repeated worker line)."""

    def flush(self) -> None:
        """Write what was taken so far."""

    def finish(self, state: str | None) -> None:
        """The job ended in ``state`` (None: cancelled): write the rest and close."""

    def abandon(self) -> None:
        """The sink failed: release what it holds (no more writes to where it failed)."""

    def warn(self, text: str) -> None:
        """Say ``text`` once in the job's output (``warning: NAME: text``)."""
        self.warnings.append(text)
        self._feed(
            Event("log", None, time.time(), {"text": f"warning: {text}", "source": self.name})
        )

    # ------------------------------------------------------------------ the thread

    def _run(self) -> None:
        started = time.thread_time()
        try:
            self._loop()
        except Exception as exc:  # the job goes on without this sink
            self._off = True
            why = str(exc) if isinstance(exc, SinkError) else f"{type(exc).__name__}: {exc}"
            self.warn(f"{self.describe()}: {why}; the job goes on without it")
            try:
                self.abandon()
            except Exception:
                pass
        finally:
            self._off = True  # nothing more is queued once the thread is gone
            self.cpu_seconds = time.thread_time() - started
            self._done.set()

    def _loop(self) -> None:
        due = time.monotonic() + self.flush_every
        while True:
            self._wake.wait(self.batch_every)
            self._wake.clear()
            end = self._take()
            if end is not None:
                self.finish(None if isinstance(end, _Stop) else end)
                return
            if time.monotonic() >= due:
                self.flush()
                due = time.monotonic() + self.flush_every

    def _take(self) -> str | _Stop | None:
        """Handle everything queued; the terminal state (or the stop) when it was among it."""
        end: str | _Stop | None = None
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return end
            if isinstance(item, _Stop):
                return end or item
            if not self._copies.first(item) or (end is not None and item.kind == "job"):
                continue
            self.handle(item)
            state = item.get("state") if item.kind == "job" else None
            if state in TERMINAL_STATES:
                end = str(state)  # what is queued after it is still taken

    def describe(self) -> str:
        """What this sink writes to, for messages."""
        return self.name
