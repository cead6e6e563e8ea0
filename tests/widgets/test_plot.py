"""The loss-curve panel over real JobMonitors and plotly widgets (widgets/plot.py)."""

from __future__ import annotations

import time

import numpy as np
import pytest

from jupyter_disttrain.events import Event, job_event
from jupyter_disttrain.monitor import JobMonitor
from jupyter_disttrain.widgets.plot import MetricPlot

from .streams import T0, hello, metric, monitor_of, recorded, upto
from .test_streaming_figure import Wire, ready
from .test_trace_feed import naive_ema


def traces(plot: MetricPlot) -> dict[str, tuple[list[float], list[float]]]:
    return {t.name: (list(t.x), list(t.y)) for t in plot.figure.data}


def render(plot: MetricPlot, mon: JobMonitor) -> None:
    plot.render(mon.snapshot())


def test_every_metric_is_selectable_with_rank_lines_and_mean() -> None:
    mon = monitor_of("oom_straggler", nodes=1, nproc=4)
    plot = MetricPlot(mon)
    render(plot, mon)
    assert list(plot.metric.options) == ["loss", "grad_norm"]
    assert plot.metric.value == "loss"
    shown = traces(plot)
    assert set(shown) == {"rank 0", "rank 1", "rank 2", "rank 3", "mean"}
    series = mon.series("loss", 3)
    assert shown["rank 3"] == (series.steps.tolist(), series.values.tolist())
    steps, means = mon.mean_series("loss")
    assert shown["mean"] == (steps.tolist(), means.tolist())
    assert plot.figure.layout.title.text == "loss"

    plot.metric.value = "grad_norm"
    render(plot, mon)
    assert traces(plot)["rank 2"][1] == mon.series("grad_norm", 2).values.tolist()
    assert plot.figure.layout.title.text == "grad_norm"


def test_rank_lines_and_mean_can_be_switched_off() -> None:
    mon = monitor_of("oom_straggler", nodes=1, nproc=4)
    plot = MetricPlot(mon)
    plot.show_ranks.value = False
    render(plot, mon)
    assert set(traces(plot)) == {"mean"}
    plot.show_ranks.value, plot.show_mean.value = True, False
    render(plot, mon)
    assert set(traces(plot)) == {"rank 0", "rank 1", "rank 2", "rank 3"}


def test_ema_smooths_each_line() -> None:
    mon = monitor_of("oom_straggler", nodes=1, nproc=4)
    plot = MetricPlot(mon)
    plot.smoothing.value = 0.6
    render(plot, mon)
    raw = mon.series("loss", 3).values.tolist()
    np.testing.assert_allclose(traces(plot)["rank 3"][1], naive_ema(raw, 0.6))
    assert plot.figure.layout.title.text == "loss (EMA 0.60)"


def test_log_y_and_wall_time_axes() -> None:
    mon = monitor_of("oom_straggler", nodes=1, nproc=4)
    plot = MetricPlot(mon)
    plot.log_y.value = True
    plot.x_axis.value = "time"
    render(plot, mon)
    assert plot.figure.layout.yaxis.type == "log"
    assert plot.figure.layout.xaxis.type == "date"
    times = mon.series("loss", 0).times
    assert traces(plot)["rank 0"][0] == (times * 1000).tolist()
    plot.log_y.value = False
    render(plot, mon)
    assert plot.figure.layout.yaxis.type == "linear"


def test_new_points_are_appended_not_resent() -> None:
    events = recorded("oom_straggler")
    mon = JobMonitor("oom", "local", 4, nodes=1, nproc=4)
    mon.feed_many(upto(events, "metric", 20))
    plot = MetricPlot(mon, draw_every=0)  # every render draws what is new
    render(plot, mon)
    ready(plot.figure)
    wire = Wire(plot.figure)
    mon.feed_many(events[len(upto(events, "metric", 20)) : len(upto(events, "metric", 24))])
    render(plot, mon)
    [(content, buffers)] = wire.custom()
    assert content["type"] == "append"
    appended = sum(np.frombuffer(b).size for b in buffers[::2])
    assert appended <= 4 + 3  # one point per rank, plus the mean's newly complete steps
    assert all(keep > 0 for keep in content["keep"])
    shown = traces(plot)
    for rank in range(4):
        assert shown[f"rank {rank}"][1] == mon.series("loss", rank).values.tolist()


def test_mean_waits_for_running_ranks_and_completes_at_the_end() -> None:
    mon = JobMonitor("m", "local", 2)
    for r in range(2):
        mon.feed(hello(r, T0, world=2))
    plot = MetricPlot(mon, draw_every=0)
    mon.feed_many([metric(0, T0 + s, s, loss=float(s)) for s in range(5)])
    mon.feed_many([metric(1, T0 + s, s, loss=float(s) + 2) for s in range(3)])
    render(plot, mon)
    assert traces(plot)["mean"] == ([0.0, 1.0, 2.0], [1.0, 2.0, 3.0])
    mon.feed(metric(1, T0 + 3, 3, loss=5.0))
    render(plot, mon)
    assert traces(plot)["mean"][0] == [0.0, 1.0, 2.0, 3.0]
    mon.feed(job_event("Succeeded", t=T0 + 9))
    render(plot, mon)
    assert traces(plot)["mean"] == ([0.0, 1.0, 2.0, 3.0, 4.0], [1.0, 2.0, 3.0, 4.0, 4.0])


def test_steps_after_a_restart_are_plotted_by_step() -> None:
    events = recorded("restart_recovery")
    mon = JobMonitor("r", "local", 4, nodes=2, nproc=2)
    plot = MetricPlot(mon)
    for chunk in np.array_split(np.arange(len(events)), 12):
        mon.feed_many([events[i] for i in chunk])
        render(plot, mon)
    plot._rebuilt = -np.inf  # the rebuild after steps ran backwards is rate-limited to 1/s
    render(plot, mon)
    x, _ = traces(plot)["rank 0"]
    assert x == sorted(set(x)) and x[-1] == 60.0


def test_a_million_points_per_series_stay_within_budget_and_are_not_all_sent() -> None:
    n = 1_000_000
    mon = JobMonitor("big", "local", 1)
    mon.feed(Event("hello", 0, T0, {"backend": "gloo", "world_size": 1}))
    plot = MetricPlot(mon, budget=4000, draw_every=0)
    render(plot, mon)
    ready(plot.figure)
    rng = np.random.default_rng(0)
    values = np.cumsum(rng.normal(size=n)) + 1e4
    values[654_321] = 1e6  # a spike must stay visible
    sent_before = plot.figure.stats.points
    for start in range(0, n, 50_000):
        chunk = values[start : start + 50_000].tolist()
        mon.feed_many(
            [
                Event("metric", 0, T0 + start + k, {"step": start + k, "values": {"loss": v}})
                for k, v in enumerate(chunk)
            ]
        )
        render(plot, mon)
        assert plot.figure.shown_points() <= 4000
    sent = plot.figure.stats.points - sent_before
    assert sent < 40_000, f"{sent} points sent for {n}"
    x, y = traces(plot)["rank 0"]
    assert x[0] == 0 and x[-1] == n - 1
    assert max(y) == 1e6 and min(y) == values.min()


def test_new_points_wait_for_the_draw_interval_and_the_end_is_drawn_at_once() -> None:
    """While the job runs, a render within ``draw_every`` s of the last draw sends nothing
    (each draw makes the page lay the chart out anew); the first render after it, or the one
    that sees the job's end, draws every point that waited."""
    mon = JobMonitor("d", "local", 1)
    mon.feed(hello(0, T0, world=1))
    mon.feed(metric(0, T0, 0, loss=1.0))
    plot = MetricPlot(mon, draw_every=3600)
    render(plot, mon)  # the first draw builds the line
    ready(plot.figure)
    wire = Wire(plot.figure)
    mon.feed(metric(0, T0 + 1, 1, loss=0.5))
    render(plot, mon)
    assert wire.custom() == [] and traces(plot)["rank 0"][0] == [0.0]
    plot.draw_every = 0.05
    time.sleep(0.1)
    mon.feed(metric(0, T0 + 2, 2, loss=0.25))
    render(plot, mon)
    assert [m["type"] for m, _ in wire.custom()] == ["append"]
    assert traces(plot)["rank 0"] == ([0.0, 1.0, 2.0], [1.0, 0.5, 0.25])
    plot.draw_every = 3600
    mon.feed(metric(0, T0 + 3, 3, loss=0.125))
    mon.feed(job_event("Succeeded", t=T0 + 4))
    render(plot, mon)  # right after the last draw, but the job ended
    assert [m["type"] for m, _ in wire.custom()] == ["append", "append"]
    assert traces(plot)["rank 0"][0] == [0.0, 1.0, 2.0, 3.0]


@pytest.mark.parametrize("x_axis", ["step", "time"])
def test_a_fresh_plot_of_a_long_series_sends_only_the_budget(x_axis: str) -> None:
    mon = JobMonitor("big", "local", 2)
    for r in range(2):
        mon.feed_many([metric(r, T0 + i, i, loss=float(i % 977)) for i in range(100_000)])
    plot = MetricPlot(mon, budget=3000)
    plot.x_axis.value = x_axis
    render(plot, mon)
    assert plot.figure.stats.points <= 3000
    assert len(plot.figure.data) == 3


def test_a_note_stands_in_for_empty_axes_until_the_first_report() -> None:
    mon = JobMonitor("quiet", "local", 2, nodes=1, nproc=2)
    mon.feed_many([hello(0, T0), hello(1, T0)])
    plot = MetricPlot(mon)
    plot.render(mon.snapshot())
    assert list(plot.widget.children) == [plot.waiting]
    assert "waiting for the first report(" in plot.waiting.value
    mon.feed(Event("metric", 0, T0 + 1, {"step": 0, "values": {"loss": 1.0}}))
    plot.render(mon.snapshot())
    assert list(plot.widget.children) == [plot.controls, plot.figure]


def test_a_job_that_reported_nothing_says_so_instead_of_a_chart() -> None:
    mon = JobMonitor("none", "local", 1, nodes=1, nproc=1)
    mon.feed_many([hello(0, T0), job_event("Succeeded", "Succeeded", "1 rank done", t=T0 + 2)])
    plot = MetricPlot(mon)
    plot.render(mon.snapshot())
    assert list(plot.widget.children) == [plot.waiting]
    assert "reported no metrics" in plot.waiting.value


def test_the_end_is_drawn_with_every_point_even_right_after_a_rebuild() -> None:
    """Steps that run backwards (a restart) make the chart rebuild at most once a second;
    the render that draws the end must not wait for that: its curve reaches the last step."""
    events = recorded("restart_recovery")
    end = next(i for i, e in enumerate(events) if e.kind == "job" and e.get("state") == "Succeeded")
    mon = JobMonitor("r", "local", 4, nodes=2, nproc=2)
    plot = MetricPlot(mon)
    for chunk in np.array_split(np.arange(end), 12):
        mon.feed_many([events[i] for i in chunk])
        render(plot, mon)
    mon.feed_many(events[end:])
    render(plot, mon)  # within a second of the rebuilds above: the final render
    snap = mon.snapshot()
    assert snap["state"] == "Succeeded"
    for row in snap["ranks"]:
        x, _ = traces(plot)[f"rank {row['rank']}"]
        assert x[-1] == row["step"], (row["rank"], x[-5:], row["step"])
    assert traces(plot)["mean"][0][-1] == max(r["step"] for r in snap["ranks"])
