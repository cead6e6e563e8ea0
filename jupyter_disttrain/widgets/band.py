"""A large job's curve: the median over ranks with a min-max band, outlier ranks drawn alone.

:class:`StepBand` keeps, per step, the minimum, median and maximum of the
ranks' values, built from each rank's new points only (a step's raw values
are dropped once every rank reported it). :class:`BandChart` draws it with a
bounded number of points whatever the number of ranks: the band and median
reduced to :data:`BAND_POINTS` steps, plus at most :data:`MAX_OUTLIERS`
outlier ranks and the ranks asked for, each reduced the same way.
"""

from __future__ import annotations

import math
import time
from array import array
from collections.abc import Sequence
from typing import Any

import numpy as np
import plotly.graph_objects as go
from numpy.typing import NDArray

from ..events import ENDED_STATES
from ..monitor import JobMonitor, Snapshot
from .streaming_figure import StreamingFigure

__all__ = ["BAND_POINTS", "MAX_OUTLIERS", "BandChart", "StepBand", "outlier_ranks"]

Floats = NDArray[np.float64]

#: Most steps a band or an individual rank's line is drawn with.
BAND_POINTS = 1500
#: Most outlier ranks drawn individually (besides the ranks asked for).
MAX_OUTLIERS = 5
#: An outlier's latest value is this many median absolute deviations from the median.
OUTLIER_MADS = 5.0
#: Seconds between redraws while the job runs (a finished job is drawn at once).
REDRAW_EVERY = 1.0
_BAND_COLOR = "rgba(99, 110, 250, 0.22)"
_MEDIAN_COLOR = "#202124"
_OUTLIER_COLORS = ("#d62728", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf")


class StepBand:
    """Per step, the min / median / max over the ranks that reported it.

    ``ranks``: how many ranks report the metric; a step that has that many
    values is complete and keeps only its figures.
    """

    def __init__(self) -> None:
        self._open: dict[int, array[float]] = {}
        self._stats: dict[int, tuple[float, float, float]] = {}
        self._dirty: set[int] = set()
        self.ranks = 0

    def add(self, steps: Floats, values: Floats) -> None:
        """One rank's new points (steps with their values)."""
        for step, value in zip(steps.tolist(), values.tolist(), strict=True):
            key = int(step)
            held = self._open.get(key)
            if held is None:
                held = self._open[key] = array("d")
                if key in self._stats:  # a late value for a closed step: reopen it empty
                    self._stats.pop(key)
            held.append(value)
            self._dirty.add(key)

    def arrays(self) -> tuple[Floats, Floats, Floats, Floats]:
        """``(steps, low, median, high)``, sorted by step."""
        for key in self._dirty:
            held = np.frombuffer(self._open[key], dtype=np.float64)
            finite = held[np.isfinite(held)]
            if finite.size:
                stat = (float(finite.min()), float(np.median(finite)), float(finite.max()))
            else:
                stat = (math.nan, math.nan, math.nan)
            self._stats[key] = stat
            if held.size >= self.ranks > 0:
                del self._open[key]
        self._dirty.clear()
        steps = np.array(sorted(self._stats), dtype=np.float64)
        if not steps.size:
            empty = np.empty(0)
            return empty, empty, empty, empty
        table = np.array([self._stats[int(s)] for s in steps.tolist()], dtype=np.float64)
        return steps, table[:, 0], table[:, 1], table[:, 2]


def reduce_band(
    steps: Floats, low: Floats, mid: Floats, high: Floats, points: int = BAND_POINTS
) -> tuple[Floats, Floats, Floats, Floats]:
    """At most ``points`` buckets of consecutive steps: each bucket's lowest low, highest
    high and the median at its last step (a band never narrower than its steps')."""
    if steps.size <= points:
        return steps, low, mid, high
    edges = np.linspace(0, steps.size, points + 1).astype(np.int64)
    starts, ends = edges[:-1], edges[1:] - 1
    with np.errstate(all="ignore"):
        lo = np.fmin.reduceat(low, starts)
        hi = np.fmax.reduceat(high, starts)
    return steps[ends], lo, mid[ends], hi


def outlier_ranks(latest: dict[int, float], limit: int = MAX_OUTLIERS) -> list[int]:
    """The ranks whose latest value lies furthest from the median, beyond
    :data:`OUTLIER_MADS` median absolute deviations (at most ``limit``), furthest first."""
    finite = {r: v for r, v in latest.items() if math.isfinite(v)}
    if len(finite) < 3:
        return []
    values = np.fromiter(finite.values(), dtype=np.float64)
    median = float(np.median(values))
    mad = float(np.median(np.abs(values - median)))
    spread = mad if mad > 0 else 1e-12 * max(1.0, abs(median))
    far = [(abs(v - median) / spread, r) for r, v in finite.items()]
    picked = sorted((item for item in far if item[0] > OUTLIER_MADS), key=lambda x: (-x[0], x[1]))
    return [r for _, r in picked[:limit]]


class BandChart:
    """Draws one metric of a large job on ``figure``: band, median, outliers, picked ranks."""

    def __init__(self, monitor: JobMonitor, figure: StreamingFigure) -> None:
        self.monitor = monitor
        self.figure = figure
        self._metric: str | None = None
        self._band = StepBand()
        self._cursors: dict[int, int] = {}
        self._key: tuple[Any, ...] | None = None
        self._drawn = -math.inf
        self.redraw_s = 0.0  # the last redraw's kernel-side seconds
        self.outliers: list[int] = []

    def render(self, metric: str, snap: Snapshot, picked: Sequence[int]) -> None:
        """Read the ranks' new points; redraw at most every :data:`REDRAW_EVERY` s."""
        if metric != self._metric:
            self._metric, self._band, self._cursors = metric, StepBand(), {}
        ranks = self.monitor.metric_ranks(metric)
        self._band.ranks = max(len(ranks), snap["world_size"])  # a step closes once all report
        for rank in ranks:
            cursor = self._cursors.get(rank, 0)
            new = self.monitor.points_since(metric, rank, cursor)
            if new.values.size:
                self._cursors[rank] = cursor + int(new.values.size)
                self._band.add(new.steps, new.values)
        key = (metric, tuple(picked), snap["restarts"])
        ended = snap["state"] in ENDED_STATES
        now = time.monotonic()
        if key == self._key and not ended and now - self._drawn < REDRAW_EVERY:
            return
        self._key, self._drawn = key, now
        self._draw(metric, snap, picked)
        self.redraw_s = time.monotonic() - now

    def _draw(self, metric: str, snap: Snapshot, picked: Sequence[int]) -> None:
        steps, low, mid, high = reduce_band(*self._band.arrays())
        latest = self.monitor.latest_values_of(metric)
        slow = [row["rank"] for row in snap["slow"]]
        self.outliers = list(dict.fromkeys([*outlier_ranks(latest), *slow]))[:MAX_OUTLIERS]
        n = self._band.ranks
        traces: list[go.Scatter] = [
            go.Scatter(
                x=steps, y=low, mode="lines", line={"width": 0}, name="min", showlegend=False
            ),
            go.Scatter(
                x=steps,
                y=high,
                mode="lines",
                line={"width": 0},
                fill="tonexty",
                fillcolor=_BAND_COLOR,
                name=f"min-max of {n} ranks",
            ),
            go.Scatter(
                x=steps,
                y=mid,
                mode="lines",
                name="median",
                line={"width": 2.4, "color": _MEDIAN_COLOR},
            ),
        ]
        for i, rank in enumerate(dict.fromkeys([*self.outliers, *picked])):
            s = self.monitor.series(metric, rank, by_step=True)
            x, y = _thin(s.steps, s.values)
            color = _OUTLIER_COLORS[i % len(_OUTLIER_COLORS)]
            label = f"rank {rank}" + (" (outlier)" if rank in self.outliers else "")
            traces.append(
                go.Scatter(x=x, y=y, mode="lines", name=label, line={"width": 1.4, "color": color})
            )
        self.figure.replace_traces(traces)


def _thin(x: Floats, y: Floats, points: int = BAND_POINTS) -> tuple[Floats, Floats]:
    """At most ``points`` of a line, evenly spaced, the last always kept."""
    if x.size <= points:
        return x, y
    keep = np.linspace(0, x.size - 1, points).astype(np.int64)
    return x[keep], y[keep]
