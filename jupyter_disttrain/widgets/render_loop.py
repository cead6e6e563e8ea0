"""One thread that re-renders a view at most ``max_rate`` times a second.

Whatever the event rate, rendering is decoupled from events: the loop polls
a version counter and renders when it changed, when :meth:`RenderLoop.wake`
was called (a control changed), or every ``tick`` seconds (clocks such as
elapsed time). Renders start at least ``1 / max_rate`` seconds apart, and
further apart when rendering is slow: a render that took ``d`` seconds of its
thread's CPU is followed by at least ``d / max_busy`` seconds, so the loop never
keeps more than ``max_busy`` of the time (and of the GIL the kernel needs) to
itself. The CPU, not the clock: a render that waited for the GIL while the
kernel was busy (a job's start) did no more work, and is not followed by a longer gap.
And no render starts while ``behind()`` says the view's front end is still
drawing earlier ones (the last render after the end does not wait).
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable

__all__ = ["RenderLoop"]

log = logging.getLogger(__name__)


class RenderLoop:
    """Calls ``render()`` on a daemon thread, throttled.

    When ``finished()`` becomes true the loop renders once more after one
    interval (so late events are shown), calls ``on_finish()`` and ends;
    :meth:`stop` does the same at once: its render waits for no gap (the
    view's owner, a cell that waited for its job, returns after it).
    Exceptions from ``render`` are logged and kept in :attr:`errors` (the
    last few); the loop goes on.
    """

    def __init__(
        self,
        render: Callable[[], None],
        version: Callable[[], int],
        finished: Callable[[], bool],
        on_finish: Callable[[], None] | None = None,
        *,
        max_rate: float = 10.0,
        max_busy: float = 0.2,
        tick: float = 1.0,
        name: str = "distrain-render",
        behind: Callable[[], bool] | None = None,
    ) -> None:
        if max_rate <= 0 or not 0 < max_busy <= 1:
            raise ValueError("max_rate must be positive and max_busy in (0, 1]")
        self.interval = 1.0 / max_rate
        self.max_busy = max_busy
        self.tick = tick
        self._gap = self.interval
        self._render = render
        self._version = version
        self._finished = finished
        self._on_finish = on_finish
        self._name = name
        self._behind = behind
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._render_lock = threading.Lock()
        self.renders = 0
        self.errors: list[str] = []
        self.render_seconds = 0.0

    @property
    def running(self) -> bool:
        """True while the thread runs."""
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> None:
        """Start the thread (once)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
            self._thread.start()

    def wake(self) -> None:
        """Ask for a render soon (still no sooner than the rate allows)."""
        self._wake.set()

    def stop(self, timeout: float = 10.0) -> None:
        """Render a last time, call ``on_finish`` and end the thread (idempotent)."""
        self._stop.set()
        self._wake.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    def render_now(self) -> None:
        """Render on the calling thread (serialised with the loop's renders)."""
        with self._render_lock:
            started, worked = time.perf_counter(), time.thread_time()
            try:
                self._render()
            except Exception as exc:
                log.exception("dashboard render failed")
                self.errors = [*self.errors[-4:], f"{type(exc).__name__}: {exc}"]
            finally:
                self.renders += 1
                self.render_seconds += time.perf_counter() - started
                self._gap = max(self.interval, (time.thread_time() - worked) / self.max_busy)

    def _run(self) -> None:
        last_version: int | None = None
        last_start = -math.inf
        while True:
            ended = self._stop.is_set() or self._is_finished()
            if not ended:
                self._wake.wait(self.interval)
            if not self._stop.is_set():  # stopped: the cell ends with this render, now
                self._pause_until(last_start + self._gap)
            self._wait_for_view()
            woken = self._wake.is_set()
            self._wake.clear()
            ended = ended or self._stop.is_set()
            if ended:  # one last render, a render gap after the previous (late events)
                self.render_now()
                if self._on_finish is not None:
                    try:
                        self._on_finish()
                    except Exception:
                        log.exception("dashboard final update failed")
                return
            version = self._version()
            now = time.monotonic()
            if woken or version != last_version or now - last_start >= self.tick:
                last_start = now
                last_version = version
                self.render_now()

    def _wait_for_view(self) -> None:
        """Wait while the front end is behind (its own answer bounds it), unless stopping."""
        while self._behind is not None and not self._stop.is_set():
            try:
                if not self._behind():
                    return
            except Exception:
                return
            self._stop.wait(self.interval / 2)

    def _pause_until(self, when: float) -> None:
        delay = when - time.monotonic()
        if delay > 0:
            time.sleep(delay)

    def _is_finished(self) -> bool:
        try:
            return self._finished()
        except Exception:
            return False
