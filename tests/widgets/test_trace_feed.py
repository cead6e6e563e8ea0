"""Smoothing, bucketing and the step mean behind the loss plot (widgets/trace_feed.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from jupyter_disttrain.monitor import Series, mean_by_step
from jupyter_disttrain.widgets.trace_feed import (
    Ema,
    MinMaxReducer,
    StepMean,
    Update,
)


def naive_ema(values: list[float], weight: float) -> list[float]:
    out, last, n = [], 0.0, 0
    for v in values:
        if not math.isfinite(v):
            out.append(v)
            continue
        n += 1
        last = last * weight + (1 - weight) * v
        out.append(last / (1 - weight**n))
    return out


@pytest.mark.parametrize("weight", [0.0, 0.3, 0.9, 0.999])
def test_ema_matches_the_sequential_definition_in_any_chunking(weight: float) -> None:
    rng = np.random.default_rng(0)
    values = rng.normal(size=10_000)
    values[[5, 500]] = [np.nan, np.inf]
    whole = Ema(weight)(values)
    ema = Ema(weight)
    chunked = np.concatenate([ema(part) for part in np.array_split(values, [1, 7, 4000, 4001])])
    expected = np.array(naive_ema(values.tolist(), weight))
    np.testing.assert_allclose(whole, expected, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(chunked, expected, rtol=1e-9, atol=1e-12)


def test_ema_rejects_a_weight_of_one() -> None:
    with pytest.raises(ValueError):
        Ema(1.0)


def apply(shown: tuple[list[float], list[float]], update: Update | None) -> None:
    """What the browser does with an update."""
    if update is None:
        return
    for column, new in zip(shown, (update.x, update.y), strict=True):
        del column[update.keep :]
        column.extend(new.tolist())


def test_short_line_is_sent_point_by_point_and_only_once() -> None:
    reducer = MinMaxReducer(100)
    shown: tuple[list[float], list[float]] = ([], [])
    sent = 0
    for i in range(40):
        update = reducer.push(np.array([float(i)]), np.array([float(i * i)]))
        assert update is not None and update.keep == i and update.x.size == 1
        sent += update.x.size
        apply(shown, update)
    assert shown[0] == [float(i) for i in range(40)]
    assert sent == 40


def test_growing_line_stays_in_budget_keeps_extremes_and_ends() -> None:
    rng = np.random.default_rng(1)
    n = 200_000
    x = np.arange(n, dtype=np.float64)
    y = np.sin(x / 5000) + rng.normal(scale=0.1, size=n)
    y[123_456] = 40.0  # a loss spike must survive
    y[77_777] = -40.0
    reducer = MinMaxReducer(1000)
    shown: tuple[list[float], list[float]] = ([], [])
    sent = 0
    for start in range(0, n, 997):
        update = reducer.push(x[start : start + 997], y[start : start + 997])
        apply(shown, update)
        sent += 0 if update is None else update.x.size
        assert len(shown[0]) == reducer.shown <= 1000
    assert shown[0][0] == 0.0 and shown[0][-1] == n - 1
    assert 40.0 in shown[1] and -40.0 in shown[1]
    assert np.all(np.diff(shown[0]) > 0)
    assert sent < n / 10, f"{sent} points sent for {n}"


def test_bulk_load_of_a_million_points_is_reduced_to_half_the_budget() -> None:
    n = 1_000_000
    x = np.arange(n, dtype=np.float64)
    y = np.cos(x / 10_000)
    update = MinMaxReducer(2000).push(x, y)
    assert update is not None and update.keep == 0
    assert update.x.size <= 1000
    assert update.y.max() == y.max() and update.y.min() == y.min()


def test_non_finite_points_are_dropped() -> None:
    reducer = MinMaxReducer(100)
    update = reducer.push(np.array([0.0, 1.0, 2.0]), np.array([1.0, np.nan, 3.0]))
    assert update is not None and update.x.tolist() == [0.0, 2.0]


def test_step_mean_releases_steps_behind_the_frontier_once() -> None:
    mean = StepMean()
    mean.add(0, np.array([0.0, 1.0, 2.0]), np.array([10.0, 11.0, 12.0]), np.array([1.0, 2.0, 3.0]))
    mean.add(1, np.array([0.0, 1.0]), np.array([20.0, 21.0]), np.array([3.0, 4.0]))
    steps, times, values = mean.release(1)
    assert steps.tolist() == [0.0, 1.0]
    assert values.tolist() == [2.0, 3.0] and times.tolist() == [15.0, 16.0]
    mean.add(1, np.array([1.0, 2.0]), np.array([0.0, 0.0]), np.array([100.0, 5.0]))  # 1 is late
    steps, _, values = mean.release(math.inf)
    assert steps.tolist() == [2.0] and values.tolist() == [4.0]


def test_step_mean_is_the_monitors_mean_a_repeated_step_counted_once() -> None:
    rank0 = Series(np.array([0.0, 1.0, 1.0]), np.array([1.0, 2.0, 3.0]), np.array([1.0, 9.0, 3.0]))
    rank1 = Series(np.array([0.0, 1.0]), np.array([1.0, 3.0]), np.array([3.0, 5.0]))
    rank2 = Series(np.array([0.0]), np.array([1.0]), np.array([np.nan]))
    live = StepMean()
    for rank, series in enumerate((rank0, rank1, rank2)):
        live.add(rank, *series)
    steps, times, values = live.release(math.inf)
    rebuilt = mean_by_step([rank0, rank1, rank2])
    assert steps.tolist() == rebuilt.steps.tolist() == [0.0, 1.0]
    assert np.isnan(values[0]) and np.isnan(rebuilt.values[0])  # a rank's NaN shows
    assert values[1] == rebuilt.values[1] == 4.0  # rank 0's step 1 counts once: its latest
    assert times.tolist() == rebuilt.times.tolist()
