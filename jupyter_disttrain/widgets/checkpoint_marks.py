"""Checkpoints marked on the dashboard's loss curve.

:class:`CheckpointMarks` puts a marker (a plotly annotation, so the plot's
traces are left alone) at each checkpoint the job reported: x its step (or
its time, when the plot is by wall time), y the mean over ranks of the
plotted metric at that step; hovering shows the step and the value. It
redraws only when the checkpoints or the plot's metric, x axis or y scale
change. At most :data:`MAX_MARKS` are drawn, spread evenly over the run, the
latest always among them: a browser redraws every annotation of a plot on each
change, so a job that checkpoints every second would otherwise make each
redraw longer until the page fell minutes behind the job (the checkpoint
browser lists every checkpoint).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..monitor import JobMonitor
from .plot import X_TIME, MetricPlot

__all__ = ["MAX_MARKS", "CheckpointMarks", "checkpoint_points", "spread"]

MARK = "\u25c6"  # a diamond
COLOR = "#d93025"
#: Markers drawn at most (see the module's docstring).
MAX_MARKS = 40


def checkpoint_points(
    monitor: JobMonitor, metric: str, *, by_time: bool = False
) -> list[tuple[int, float, float]]:
    """``(step, x, value)`` for each checkpointed step (the latest report of a step wins).

    ``value`` is the across-rank mean of ``metric`` at the checkpoint's step,
    or at the nearest earlier step reported; checkpoints before any report
    of the metric are left out.
    """
    steps, means = monitor.mean_series(metric)
    latest: dict[int, float] = {}
    for c in monitor.checkpoints():
        if c.step >= 0:
            latest[c.step] = c.t
    out = []
    for step, t in sorted(latest.items()):
        i = int(np.searchsorted(steps, step, side="right")) - 1
        if i < 0 or not math.isfinite(float(means[i])):
            continue
        out.append((step, t * 1000.0 if by_time else float(step), float(means[i])))
    return out


class CheckpointMarks:
    """Keeps a :class:`~.plot.MetricPlot`'s checkpoint markers up to date (call :meth:`render`)."""

    def __init__(self) -> None:
        self._key: tuple[Any, ...] | None = None

    def render(self, plot: MetricPlot) -> None:
        """Redraw the markers if anything they depend on changed."""
        opts = plot.options()
        count = len(plot.monitor.checkpoints())
        key = (count, opts.metric, opts.x, opts.log_y)
        if key == self._key:
            return
        if opts.metric is None or (count == 0 and self._key is None):
            self._key = key
            return
        points = spread(checkpoint_points(plot.monitor, opts.metric, by_time=opts.x == X_TIME))
        annotations = [
            annotation(step, x, value, opts.metric, opts.log_y)
            for step, x, value in points
            if value > 0 or not opts.log_y
        ]
        with plot.figure.lock, plot.figure.batch_update():
            plot.figure.layout.annotations = annotations
        self._key = key


def spread(points: list[Any], most: int = MAX_MARKS) -> list[Any]:
    """``points`` (in order) when there are at most ``most``; else ``most`` of them evenly
    spaced by position, the first and the last among them."""
    if len(points) <= most:
        return points
    chosen = np.unique(np.linspace(0, len(points) - 1, most).round().astype(int))
    return [points[i] for i in chosen]


def annotation(step: int, x: float, value: float, metric: str, log_y: bool) -> dict[str, Any]:
    """One marker (plotly places annotations on a log axis by log10 of the value)."""
    return {
        "x": x,
        "y": math.log10(value) if log_y else value,
        "xref": "x",
        "yref": "y",
        "text": MARK,
        "showarrow": False,
        "font": {"color": COLOR, "size": 13},
        "hovertext": f"checkpoint at step {step}: {metric} {value:.4g}",
        "name": f"checkpoint-{step}",
    }
