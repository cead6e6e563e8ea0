"""The live job dashboard: header, worker table, loss curves, logs, communication.

A :class:`Dashboard` renders what a :class:`~jupyter_disttrain.monitor.JobMonitor`
holds and nothing else; it never talks to a backend (Stop calls the
callable it was given). One :class:`~.render_loop.RenderLoop` thread
re-renders at most ``max_rate`` times a second, whatever the event rate.

Displayed, its bundle holds the widget view plus a static ``text/plain``
and ``text/html`` snapshot; when the job ends the display is updated once
more, so a saved notebook keeps the final state for frontends without
widgets.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import ipywidgets as w

from ..events import RAISED, TERMINAL_STATES
from ..monitor import JobMonitor, Where
from . import gc_freeze
from .checkpoint_marks import CheckpointMarks
from .comms_panel import CommsPanel
from .header import HeaderPanel
from .log_panel import LogPanel
from .plot import MetricPlot
from .rank_picker import RankPicker
from .rank_table import rank_table_html
from .render_loop import RenderLoop
from .static import snapshot_html, snapshot_text
from .style import style_tag
from .text import esc

if TYPE_CHECKING:
    from ..job import Job

__all__ = ["Dashboard"]

#: Most picked ranks drawn on a large job's chart (the table lists all of them).
MAX_DRAWN = 12
WIDGET_MIME = "application/vnd.jupyter.widget-view+json"


class Dashboard:
    """Live view of one job (``widget`` is the root ipywidget).

    ``stop`` is called when the Stop button is clicked (must return at
    once); ``finished`` says when the job is over (default: the monitor's
    state is terminal); ``blocking`` marks a cell that waits for the job, so
    the header explains why Stop cannot act. ``plot_budget`` bounds the
    points the plot holds; ``log_lines`` the log entries shown.
    """

    def __init__(
        self,
        monitor: JobMonitor,
        *,
        stop: Callable[[], object] | None = None,
        finished: Callable[[], bool] | None = None,
        blocking: bool = False,
        where: Callable[[], Where] | None = None,
        max_rate: float = 10.0,
        plot_budget: int = 20_000,
        log_lines: int = 200,
        max_rows: int = 64,
    ) -> None:
        self.monitor = monitor
        self.max_rows = max_rows
        self._finished = finished or (lambda: monitor.state in TERMINAL_STATES)
        self._handle: Any = None
        self._closed = threading.Event()
        self._held = False
        wake = self._wake
        self.header = HeaderPanel(stop, blocking=blocking, where=where)
        self.table = w.HTML()
        self.table.add_class("distrain-table")
        self.picker = RankPicker(monitor.world_size, on_change=wake)
        self.plot = MetricPlot(monitor, budget=plot_budget, on_change=wake)
        self.checkpoint_marks = CheckpointMarks()  # checkpoints on the loss curve
        self.logs = LogPanel(monitor, max_lines=log_lines, on_change=wake)
        self.comms = CommsPanel(monitor)
        self.errors = w.HTML()
        self.widget = w.VBox(
            [
                w.HTML(style_tag()),
                self.header.widget,
                self.table,
                self.picker.widget,
                self.plot.widget,
                self.logs.widget,
                self.comms.widget,
                self.errors,
            ]
        )
        self.widget.add_class("distrain-dashboard")
        self.widget.add_class(f"distrain-job-{monitor.name}")
        self._loop = RenderLoop(
            self._render,
            lambda: monitor.version,
            self._finished,
            self._finish,
            max_rate=max_rate,
            name=f"distrain-dashboard-{monitor.name}",
            behind=self.plot.figure.behind,
        )
        self._loop.render_now()

    @classmethod
    def for_job(cls, job: Job, *, blocking: bool = False, **options: Any) -> Dashboard:
        """A dashboard of ``job``: Stop calls ``job.stop(wait=False)``, Where ``job.where()``."""
        return cls(
            job.monitor,
            stop=lambda: job.stop(wait=False),
            where=job.where,
            finished=lambda: job.done,
            blocking=blocking,
            **options,
        )

    # -- lifecycle ---------------------------------------------------------------

    @property
    def renders(self) -> int:
        """Renders so far (the first one happens in the constructor)."""
        return self._loop.renders

    @property
    def render_errors(self) -> list[str]:
        """The last render exceptions (rendering goes on after one)."""
        return list(self._loop.errors)

    def start(self) -> None:
        """Start the render thread (see :mod:`.gc_freeze`)."""
        if not self._loop.running and not self._closed.is_set():
            gc_freeze.hold()
            self._held = True
            self._loop.start()

    def show(self) -> None:
        """Display in the current cell (widget plus static snapshot) and start rendering."""
        from IPython.display import display

        self._handle = display(self, display_id=True)
        self.start()

    def close(self, timeout: float = 10.0) -> None:
        """Render the final state, refresh the static snapshot and stop the thread."""
        if self._loop.running:
            self._loop.stop(timeout)
        elif not self._closed.is_set():
            self._loop.render_now()
            self._finish()

    def render(self) -> None:
        """Render now on the calling thread (the loop does this on its own)."""
        self._loop.render_now()

    def _wake(self) -> None:
        self._loop.wake()

    def _render(self) -> None:
        snap = self.monitor.snapshot()
        self.header.render(snap, over=self.monitor.ended or snap["state"] == RAISED)
        self.picker.render(snap)
        self.plot.picked = self.picker.opened[:MAX_DRAWN]
        self.table.value = rank_table_html(snap, max_rows=self.max_rows, opened=self.picker.opened)
        self.plot.render(snap)
        self.checkpoint_marks.render(self.plot)
        self.logs.render(snap)
        self.comms.render(snap)
        errors = self._loop.errors
        self.errors.value = (
            f'<div class="distrain-note">dashboard error: {esc(errors[-1])}</div>' if errors else ""
        )

    def _finish(self) -> None:
        """After the last render: refresh the display so it keeps the final snapshot.

        The chart's model first gets its whole data: the views the refreshed
        display makes draw from it (appends reached only the views then shown).
        """
        self._closed.set()
        if self._held:
            self._held = False
            gc_freeze.release()
        self.plot.figure.resync()
        if self._handle is not None:
            self._handle.update(self)

    # -- display -----------------------------------------------------------------

    def static_text(self) -> str:
        """The text snapshot of the current state."""
        return snapshot_text(self.monitor.snapshot(), self.comms.summary())

    def static_html(self) -> str:
        """The HTML snapshot of the current state."""
        return snapshot_html(self.monitor.snapshot(), self.monitor, self.comms.summary())

    def _repr_mimebundle_(
        self, include: Any = None, exclude: Any = None, **kwargs: Any
    ) -> dict[str, Any]:
        return {
            WIDGET_MIME: {"version_major": 2, "version_minor": 0, "model_id": self.widget.model_id},
            "text/plain": self.static_text(),
            "text/html": self.static_html(),
        }
