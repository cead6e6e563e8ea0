"""Downsampling: LTTB against a plain reference, min/max extremes, edge cases."""

from __future__ import annotations

import itertools
from collections.abc import Callable

import numpy as np
import pytest
from numpy.typing import ArrayLike, NDArray

from jupyter_disttrain.widgets import downsample
from jupyter_disttrain.widgets.downsample import lttb, minmax

Floats = NDArray[np.float64]
DownsampleFn = Callable[[ArrayLike, ArrayLike, int], tuple[Floats, Floats]]


def reference_lttb(x: list[float], y: list[float], n_out: int) -> list[int]:
    """Straightforward sequential LTTB returning the kept indices."""
    n = len(x)
    if n_out >= n:
        return list(range(n))
    if n_out == 2:
        return [0, n - 1]
    buckets = n_out - 2
    edges = [1 + (i * (n - 2)) // buckets for i in range(buckets + 1)]
    kept = [0]
    a = 0
    for i in range(buckets):
        if i + 1 < buckets:
            lo, hi = edges[i + 1], edges[i + 2]
            cx = sum(x[lo:hi]) / (hi - lo)
            cy = sum(y[lo:hi]) / (hi - lo)
        else:
            cx, cy = x[n - 1], y[n - 1]
        best, pick = -1.0, -1
        for j in range(edges[i], edges[i + 1]):
            area = abs((x[a] - cx) * (y[j] - y[a]) - (x[a] - x[j]) * (cy - y[a])) / 2
            if area > best:
                best, pick = area, j
        kept.append(pick)
        a = pick
    kept.append(n - 1)
    return kept


@pytest.mark.parametrize("table_max", [0, 10**9, 16], ids=["loop", "table", "auto"])
def test_lttb_matches_reference(monkeypatch: pytest.MonkeyPatch, table_max: int) -> None:
    monkeypatch.setattr(downsample, "_TABLE_MAX_BUCKET", table_max)
    rng = np.random.default_rng(7)
    checked = 0
    for _ in range(150):
        n = int(rng.integers(3, 400))
        n_out = int(rng.integers(2, n + 3))
        x = np.sort(rng.uniform(0, 1000, n)) + 1.7e9  # Unix-time-like x
        y = np.cumsum(rng.normal(size=n)) if rng.random() < 0.5 else rng.normal(size=n)
        want = reference_lttb(x.tolist(), y.tolist(), n_out)
        gx, gy = lttb(x, y, n_out)
        assert gx.tolist() == x[want].tolist()
        assert gy.tolist() == y[want].tolist()
        checked += n_out < n
    assert checked > 100


def test_lttb_known_small_case() -> None:
    x = np.arange(7, dtype=float)
    y = np.array([0.0, 5.0, 0.1, 0.2, -4.0, 0.3, 0.0])
    gx, gy = lttb(x, y, 4)
    # buckets [1, 3) and [3, 6): the spike at 1 and the dip at 4 survive
    assert gx.tolist() == [0.0, 1.0, 4.0, 6.0]
    assert gy.tolist() == [0.0, 5.0, -4.0, 0.0]


@pytest.mark.parametrize("fn", [lttb, minmax])
def test_edge_cases(fn: DownsampleFn) -> None:
    empty = fn([], [], 10)
    assert empty[0].size == 0 and empty[1].size == 0
    assert [a.tolist() for a in fn([1.0], [2.0], 10)] == [[1.0], [2.0]]
    assert [a.tolist() for a in fn([1.0, 2.0], [3.0, 4.0], 2)] == [[1.0, 2.0], [3.0, 4.0]]
    x = np.arange(10.0)
    same_x, same_y = fn(x, x * 2, 10)
    assert same_x.tolist() == x.tolist() and same_y.tolist() == (x * 2).tolist()
    ends = fn(x, x * 2, 2)
    assert ends[0].tolist() == [0.0, 9.0] and ends[1].tolist() == [0.0, 18.0]
    with pytest.raises(ValueError):
        fn(x, x, 1)
    with pytest.raises(ValueError):
        fn(x, x[:-1], 5)
    with pytest.raises(ValueError):
        fn(np.ones((2, 2)), np.ones((2, 2)), 5)


@pytest.mark.parametrize("fn", [lttb, minmax])
def test_non_finite_points_are_dropped(fn: DownsampleFn) -> None:
    x = np.arange(8.0)
    y = np.array([1.0, np.nan, 3.0, np.inf, 5.0, 6.0, -np.inf, 8.0])
    gx, gy = fn(x, y, 100)
    assert gx.tolist() == [0.0, 2.0, 4.0, 5.0, 7.0]
    assert np.isfinite(gy).all()
    x_nan = np.array([0.0, np.nan, 2.0])
    assert fn(x_nan, np.ones(3), 100)[0].tolist() == [0.0, 2.0]
    big_x = np.arange(1000.0)
    big_y = np.sin(big_x)
    big_y[::7] = np.nan
    gx, gy = fn(big_x, big_y, 50)
    assert len(gx) <= 50 and np.isfinite(gy).all()
    assert gx[0] == 1.0 and gx[-1] == 999.0  # first and last finite points


def test_minmax_keeps_extremes_of_every_bucket() -> None:
    rng = np.random.default_rng(3)
    for _ in range(100):
        n = int(rng.integers(3, 2000))
        n_out = int(rng.integers(2, n + 2))
        x = np.sort(rng.uniform(0, 50, n))
        y = rng.normal(size=n)
        gx, gy = minmax(x, y, n_out)
        assert len(gx) <= n_out
        assert (gx[0], gx[-1]) == (x[0], x[-1])
        assert np.all(np.diff(gx) > 0)  # in x order, no duplicates
        if n_out >= n:
            assert len(gx) == n
            continue
        assert gy.max() == y.max() and gy.min() == y.min()
        buckets = (n_out - 2) // 2
        if buckets == 0:
            assert len(gx) == 2
            continue
        edges = 1 + (np.arange(buckets + 1) * (n - 2)) // buckets
        kept = set(gx.tolist())
        for lo, hi in itertools.pairwise(edges):
            seg_x, seg_y = x[lo:hi], y[lo:hi]
            assert seg_x[seg_y.argmin()] in kept
            assert seg_x[seg_y.argmax()] in kept
            assert len(kept & set(seg_x.tolist())) <= 2


def test_a_million_epoch_seconds_keep_both_ends() -> None:
    """A million points at epoch-second abscissae (floats near 1.7e9): at most the budget,
    the first and last kept. Their speed is measured in ``bench/monitor.py``."""
    rng = np.random.default_rng(0)
    n = 1_000_000
    x = np.arange(n, dtype=float) + 1.7e9
    y = np.cumsum(rng.normal(size=n))
    for fn in (lttb, minmax):
        gx, _ = fn(x, y, 2000)
        assert len(gx) <= 2000 and gx[0] == x[0] and gx[-1] == x[-1]
