"""Loss curves: a metric's per-rank lines and across-rank mean, from a JobMonitor.

A large job (see :mod:`~..monitor.scale`) is drawn as a band instead
(:class:`~.band.BandChart`): the median with a min-max band, outlier ranks
and the ranks picked (:attr:`MetricPlot.picked`) drawn individually.

Controls: metric, x by step or wall time, EMA smoothing, log y, per-rank
lines and mean on/off. Data flows incrementally: each render reads only
the points a rank reported since the last one (``points_since``), smooths
them, buckets them (:class:`~.trace_feed.MinMaxReducer`) and appends them to
the figure (:class:`~.streaming_figure.StreamingFigure`). A line is rebuilt
from the whole series only when its shape changes: another metric, x axis
or smoothing, a new rank, or a restart when x is the step (steps repeat).
New points are drawn at most every :data:`DRAW_EVERY` seconds while the job
runs: each draw makes the page's plotly lay out and paint the whole chart
again, which is most of what a running job's dashboard costs the browser.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import ipywidgets as w
import numpy as np
import plotly.colors
import plotly.graph_objects as go

from ..events import ENDED_STATES
from ..monitor import JobMonitor, Series, Snapshot, latest_by_step, mean_by_step
from ..monitor.scale import summarised
from .band import BandChart
from .streaming_figure import StreamingFigure
from .trace_feed import Ema, MinMaxReducer, StepMean, Update

__all__ = ["DRAW_EVERY", "MetricPlot", "PlotOptions"]

#: Shown instead of empty axes until the first ``report()``, and when none came.
WAITING = "waiting for the first report(step=..., loss=...) to chart"
NONE = "the job reported no metrics (call report(step=..., name=value) to chart them)"

X_STEP = "step"
X_TIME = "time"
_PALETTE = plotly.colors.qualitative.Plotly
_MEAN_COLOR = "#202124"
_REBUILD_EVERY = 1.0  # seconds between rebuilds while steps run backwards after a restart
#: Seconds between two draws of new points while the job runs (its end, a control's change
#: and a new rank are drawn at once; points that wait are drawn by the next render, which
#: the dashboard's loop makes at least once a second). Each draw costs Chromium about 50 ms
#: of CPU for a 2x2 job's lines: at ten a second, 0.7 of a core (bench/dashboard_cpu.py).
DRAW_EVERY = 0.5


@dataclass(frozen=True)
class PlotOptions:
    """What the controls ask for."""

    metric: str | None = None
    x: str = X_STEP
    ema: float = 0.0
    log_y: bool = False
    ranks: bool = True
    mean: bool = True


@dataclass
class _Line:
    """One trace: its index in the figure, smoothing state and bucketing."""

    index: int
    ema: Ema
    reducer: MinMaxReducer

    def push(self, x: np.ndarray[Any, Any], y: np.ndarray[Any, Any]) -> Update | None:
        return self.reducer.push(x, self.ema(y))


@dataclass
class _Source:
    """Where the plot is in one rank's series, and the rank's line if shown."""

    cursor: int = 0
    last_x: float = -math.inf
    line: _Line | None = None


@dataclass
class _State:
    sources: dict[int, _Source] = field(default_factory=dict)
    mean: _Line | None = None
    step_mean: StepMean = field(default_factory=StepMean)


class MetricPlot:
    """The loss-curve panel (``widget``); :meth:`render` runs on the render thread.

    ``budget`` bounds the points the figure holds over all lines; a line gets
    ``budget / lines`` (at least 64). ``on_change`` is called (kernel thread)
    when a control changes, to ask for a render. ``draw_every``: the least
    seconds between two draws of new points while the job runs (default
    :data:`DRAW_EVERY`, read when the plot is made).
    """

    def __init__(
        self,
        monitor: JobMonitor,
        *,
        budget: int = 20_000,
        on_change: Callable[[], None] = lambda: None,
        height: int = 320,
        draw_every: float | None = None,
    ) -> None:
        self.monitor = monitor
        self.budget = budget
        self.draw_every = DRAW_EVERY if draw_every is None else draw_every
        self.metric = w.Dropdown(options=[], description="metric", layout=w.Layout(width="230px"))
        self.x_axis = w.ToggleButtons(
            options=[("step", X_STEP), ("wall time", X_TIME)],
            value=X_STEP,
            tooltips=["x: training step", "x: wall-clock time of each report"],
            style={"button_width": "80px"},
        )
        self.smoothing = w.FloatSlider(
            value=0.0,
            min=0.0,
            max=0.99,
            step=0.01,
            description="EMA",
            continuous_update=False,
            readout_format=".2f",
            tooltip="exponential moving average weight (0: off)",
            layout=w.Layout(width="230px"),
        )
        self.log_y = w.Checkbox(value=False, description="log y", indent=False)
        self.show_ranks = w.Checkbox(
            value=monitor.world_size <= 32, description="per rank", indent=False
        )
        self.show_mean = w.Checkbox(value=True, description="mean", indent=False)
        controls = [
            self.metric,
            self.x_axis,
            self.smoothing,
            self.log_y,
            self.show_ranks,
            self.show_mean,
        ]
        for control in controls:
            control.observe(lambda _change: on_change(), names="value")
        for box in (self.log_y, self.show_ranks, self.show_mean):
            box.layout = w.Layout(width="auto")
        self.figure = StreamingFigure(
            layout=go.Layout(
                height=height,
                template="plotly_white",
                paper_bgcolor="rgba(0,0,0,0)",  # the page's background (its theme) shows
                plot_bgcolor="rgba(0,0,0,0)",
                font={"color": "#8a8f98"},  # readable on light and dark until the page restyles
                margin={"l": 55, "r": 10, "t": 30, "b": 40},
                legend={"orientation": "h", "y": 1.02, "yanchor": "bottom", "x": 0},
                uirevision="distrain",
                title={"text": "no metrics reported yet", "font": {"size": 13}},
            )
        )
        self.controls = w.HBox(controls, layout=w.Layout(flex_flow="row wrap", gap="4px 10px"))
        # no empty axes: a note until the first report(), then the controls and the chart
        self.waiting = w.HTML(f'<div class="distrain-plot-waiting distrain-note">{WAITING}</div>')
        self.widget = w.VBox([self.waiting])
        self.widget.add_class("distrain-plot-panel")
        self._key: tuple[Any, ...] | None = None
        self._layout_key: tuple[Any, ...] | None = None
        self._state = _State()
        self._stale = False
        self._rebuilt = -math.inf
        self._drawn = -math.inf
        self.band = BandChart(monitor, self.figure)
        # a figure on a new comm is a new model: the panel's view must make a view of it
        self.figure.on_reopened(lambda: self.widget.send_state("children"))
        #: Ranks drawn individually on a large job's band chart (the dashboard's rank picker).
        self.picked: list[int] = []

    def options(self) -> PlotOptions:
        """The controls' current values."""
        metric = self.metric.value
        return PlotOptions(
            metric=metric if isinstance(metric, str) else None,
            x=str(self.x_axis.value),
            ema=float(self.smoothing.value),
            log_y=bool(self.log_y.value),
            ranks=bool(self.show_ranks.value),
            mean=bool(self.show_mean.value),
        )

    def render(self, snap: Snapshot) -> None:
        """Bring the figure up to date with the monitor."""
        names = self.monitor.metric_names()
        if tuple(names) != tuple(self.metric.options):
            current = self.metric.value
            with self.metric.hold_sync():
                self.metric.options = names
                if names:
                    self.metric.value = current if current in names else _default_metric(names)
        opts = self.options()
        if opts.metric is None:
            if snap["state"] in ENDED_STATES:
                self.waiting.value = (
                    f'<div class="distrain-plot-waiting distrain-note">{NONE}</div>'
                )
            return
        with self.figure.lock:  # a new comm (see StreamingFigure) changes the figure's id
            if self.figure not in self.widget.children:
                self.widget.children = (self.controls, self.figure)
        ranks = self.monitor.metric_ranks(opts.metric)
        if summarised(max(len(ranks), snap["world_size"])):  # median, band, outliers
            for control in (self.x_axis, self.show_ranks, self.show_mean):
                control.disabled = True
            self.band.render(opts.metric, snap, self.picked)
            self._relayout(replace(opts, x=X_STEP))
            return
        restarts = snap["restarts"] if opts.x == X_STEP else 0
        key = (opts, tuple(ranks), restarts)
        now = time.monotonic()
        # the end is drawn complete: a job that ended gets no later render to catch up in
        ended = snap["state"] in ENDED_STATES
        if not self._stale and key == self._key and (ended or now - self._drawn >= self.draw_every):
            self._extend(opts, snap)
            self._drawn = now
        if key != self._key or (self._stale and (ended or now - self._rebuilt >= _REBUILD_EVERY)):
            self._rebuild(opts, ranks, snap)
            self._key = key
            self._rebuilt = self._drawn = now
        self._relayout(opts)

    # -- full build ----------------------------------------------------------------

    def _rebuild(self, opts: PlotOptions, ranks: list[int], snap: Snapshot) -> None:
        assert opts.metric is not None
        self._stale = False
        state = _State()
        shown = [r for r in ranks if opts.ranks]
        with_mean = opts.mean and len(ranks) > 1
        per_line = max(64, self.budget // max(1, len(shown) + with_mean))
        traces: list[go.Scatter] = []
        raw: dict[int, Series] = {}
        for rank in ranks:
            s = self.monitor.series(opts.metric, rank)
            source = _Source(cursor=int(s.values.size))
            steps, times, values = s.steps, s.times, s.values
            if opts.x == X_STEP:
                steps, times, values = latest_by_step(Series(steps, times, values))
            else:
                order = np.argsort(times, kind="stable")
                steps, times, values = steps[order], times[order], values[order]
            raw[rank] = Series(steps, times, values)
            x = steps if opts.x == X_STEP else times * 1000.0
            if x.size:
                source.last_x = float(x[-1])
            if rank in shown:
                line = _Line(len(traces), Ema(opts.ema), MinMaxReducer(per_line))
                update = line.push(x, values)
                traces.append(_rank_trace(rank, update))
                source.line = line
            state.sources[rank] = source
        if with_mean:
            steps, times, values = mean_by_step(list(raw.values()))
            frontier = _frontier(snap, ranks)
            done = steps <= frontier
            line = _Line(len(traces), Ema(opts.ema), MinMaxReducer(per_line))
            x = steps[done] if opts.x == X_STEP else times[done] * 1000.0
            traces.append(_mean_trace(line.push(x, values[done])))
            state.mean = line
            if done.any():
                state.step_mean.skip_to(float(steps[done][-1]))
            for rank, (s_steps, s_times, s_values) in raw.items():
                state.step_mean.add(rank, s_steps, s_times, s_values)
        self._state = state
        self.figure.replace_traces(traces)

    # -- incremental ------------------------------------------------------------------

    def _extend(self, opts: PlotOptions, snap: Snapshot) -> None:
        assert opts.metric is not None
        state = self._state
        updates: list[tuple[int, Update]] = []
        for rank, source in state.sources.items():
            new = self.monitor.points_since(opts.metric, rank, source.cursor)
            if new.values.size == 0:
                continue
            source.cursor += int(new.values.size)
            x = new.steps if opts.x == X_STEP else new.times * 1000.0
            if x[0] < source.last_x or (x.size > 1 and bool(np.any(np.diff(x) < 0))):
                self._stale = True  # steps ran backwards: rebuilt (by step) shortly
                return
            source.last_x = float(x[-1])
            if source.line is not None:
                update = source.line.push(x, new.values)
                if update is not None:
                    updates.append((source.line.index, update))
            if state.mean is not None:
                state.step_mean.add(rank, new.steps, new.times, new.values)
        if state.mean is not None:
            steps, times, values = state.step_mean.release(_frontier(snap, list(state.sources)))
            if steps.size:
                x = steps if opts.x == X_STEP else times * 1000.0
                update = state.mean.push(x, values)
                if update is not None:
                    updates.append((state.mean.index, update))
        self.figure.append(updates)

    def _relayout(self, opts: PlotOptions) -> None:
        key = (opts.metric, opts.x, opts.log_y, opts.ema)
        if key == self._layout_key:
            return
        self._layout_key = key
        smooth = f" (EMA {opts.ema:.2f})" if opts.ema else ""
        with self.figure.lock, self.figure.batch_update():
            self.figure.layout.title.text = f"{opts.metric}{smooth}"
            self.figure.layout.xaxis.title.text = "step" if opts.x == X_STEP else "wall time"
            self.figure.layout.xaxis.type = "linear" if opts.x == X_STEP else "date"
            self.figure.layout.yaxis.type = "log" if opts.log_y else "linear"


def _default_metric(names: list[str]) -> str:
    """``loss`` if reported, else the first metric."""
    return "loss" if "loss" in names else names[0]


def _frontier(snap: Snapshot, ranks: list[int]) -> float:
    """The step every running, non-straggling rank of ``ranks`` has reached.

    ``inf`` once the job ended; ``-inf`` while none of them runs.
    """
    if snap["state"] in ENDED_STATES:
        return math.inf
    wanted = set(ranks)
    lagging = set(snap["stragglers"])
    steps = [
        r["step"]
        for r in snap["ranks"]
        if r["rank"] in wanted
        and r["state"] == "Running"
        and r["rank"] not in lagging
        and r["step"] is not None
    ]
    return float(min(steps)) if steps else -math.inf


def _rank_trace(rank: int, update: Update | None) -> go.Scatter:
    x, y = (np.empty(0), np.empty(0)) if update is None else (update.x, update.y)
    return go.Scatter(
        x=x,
        y=y,
        mode="lines",
        name=f"rank {rank}",
        line={"width": 1.3, "color": _PALETTE[rank % len(_PALETTE)]},
        opacity=0.8,
    )


def _mean_trace(update: Update | None) -> go.Scatter:
    x, y = (np.empty(0), np.empty(0)) if update is None else (update.x, update.y)
    return go.Scatter(
        x=x, y=y, mode="lines", name="mean", line={"width": 2.6, "color": _MEAN_COLOR}
    )
