"""The mean across ranks (monitor/records.py ``mean_by_step``), seen by the plot and the monitor."""

from __future__ import annotations

import numpy as np

from jupyter_disttrain.events import Event
from jupyter_disttrain.monitor import JobMonitor, Series, mean_by_step


def test_the_mean_is_each_ranks_latest_value_per_step_averaged() -> None:
    mon = JobMonitor("j", "local", 3)
    t, latest = 1.0, {}
    for step in range(20):
        for rank in range(3):
            if (step + rank) % 4:  # some ranks skip some steps
                value = step * 10.0 + rank
                mon.feed(Event("metric", rank, t, {"step": step, "values": {"loss": value}}))
                latest[(rank, step)] = (t, value)
            t += 1
    mon.feed(Event("metric", 1, t, {"step": 3, "values": {"loss": -5.0}}))  # the latest counts
    latest[(1, 3)] = (t, -5.0)
    expected = {}
    for (_, step), point in latest.items():
        expected.setdefault(step, []).append(point)
    mean = mean_by_step([mon.series("loss", r) for r in range(3)])
    assert mean.steps.tolist() == sorted(expected)
    np.testing.assert_allclose(
        mean.values, [np.mean([v for _, v in expected[s]]) for s in sorted(expected)]
    )
    np.testing.assert_allclose(
        mean.times, [np.mean([x for x, _ in expected[s]]) for s in sorted(expected)]
    )
    steps, values = mon.mean_series("loss")  # the monitor's own mean is the same one
    np.testing.assert_array_equal(steps, mean.steps)
    np.testing.assert_array_equal(values, mean.values)


def test_no_points_no_mean() -> None:
    empty = Series(np.empty(0), np.empty(0), np.empty(0))
    assert mean_by_step([]).steps.size == 0 and mean_by_step([empty, empty]).values.size == 0
