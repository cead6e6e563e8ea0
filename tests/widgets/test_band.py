"""A large job's chart: median, min-max band, outlier and picked ranks (band.py), on the real
plotly figure model, fed 1,024 ranks' signed lines."""

from __future__ import annotations

import numpy as np
import pytest

from jupyter_disttrain.widgets.band import BAND_POINTS, StepBand, outlier_ranks, reduce_band
from jupyter_disttrain.widgets.plot import MetricPlot
from tests.monitor.scale_streams import SPAN_S, LargeJob


@pytest.fixture(scope="module")
def job() -> LargeJob:
    big = LargeJob()
    big.start()
    big.train(slow={517: 1.8}, loss_scale={300: 5.0})
    return big


def test_the_band_holds_each_steps_min_median_and_max() -> None:
    band = StepBand()
    band.ranks = 3
    band.add(np.array([0.0, 1.0]), np.array([1.0, 4.0]))
    band.add(np.array([0.0]), np.array([3.0]))
    band.add(np.array([0.0, 1.0]), np.array([2.0, np.nan]))
    steps, low, mid, high = band.arrays()
    assert steps.tolist() == [0.0, 1.0]
    assert (low.tolist(), mid.tolist(), high.tolist()) == ([1.0, 4.0], [2.0, 4.0], [3.0, 4.0])


def test_a_reduced_band_is_never_narrower_than_its_steps() -> None:
    steps = np.arange(10_000, dtype=np.float64)
    low, high = -np.ones_like(steps), np.ones_like(steps)
    low[4321], high[777] = -9.0, 9.0
    s, lo, _mid, hi = reduce_band(steps, low, (low + high) / 2, high, points=100)
    assert s.size == 100 and lo.min() == -9.0 and hi.max() == 9.0


def test_outliers_are_the_ranks_far_from_the_median() -> None:
    latest = {r: 1.0 + 0.01 * (r % 5) for r in range(1000)} | {300: 5.0, 12: -2.0}
    assert outlier_ranks(latest) == [300, 12]


def test_a_large_job_is_drawn_as_a_median_band_with_outliers(job: LargeJob) -> None:
    plot = MetricPlot(job.monitor)
    plot.picked = [42]
    plot.render(job.monitor.snapshot(now=job.t0 + SPAN_S))
    fig = plot.figure
    names = [trace.name for trace in fig.data]
    assert names[:3] == ["min", "min-max of 1024 ranks", "median"], names
    assert set(names[3:]) == {"rank 300 (outlier)", "rank 517 (outlier)", "rank 42"}, names
    assert fig.data[1].fill == "tonexty"
    median = np.asarray(fig.data[2].y)
    first = [1.0 / (step + 1) for step in range(20)]
    assert np.allclose(median, np.array(first) + 0.003), median  # rank % 7 = 3 is the median
    assert np.asarray(fig.data[1].y)[0] == pytest.approx(5 * (1.0 + 0.001 * (300 % 7)))
    assert max(len(trace.x) for trace in fig.data) <= BAND_POINTS
    assert plot.show_ranks.disabled and plot.x_axis.disabled


def test_the_redraw_is_bounded_however_many_ranks(job: LargeJob) -> None:
    plot = MetricPlot(job.monitor)
    plot.render(job.monitor.snapshot(now=job.t0 + SPAN_S))
    points = sum(len(trace.x) for trace in plot.figure.data)
    assert points <= (3 + 5) * BAND_POINTS
    assert len(plot.figure.data) <= 3 + 5
