"""Bounded, incremental plot data for the lines of the loss plot (pure numpy).

A metric series only grows, and the browser should get each new point once
and never hold more than ``budget`` points per line. :class:`MinMaxReducer`
keeps, for every bucket of consecutive raw points, the bucket's minimum and
maximum (so spikes survive); while a line is short a bucket is one point.
New points only append to what the browser holds, except when the budget
is exceeded: then buckets double in size (pairs of buckets merge, which is
exact for min/max) and the whole line, now about half the budget, is sent
again. Over a series of ``n`` points that costs ``O(budget * log(n /
budget))`` points sent in all, instead of ``n``.

:class:`Ema` smooths values before they are bucketed; :class:`StepMean`
builds the across-rank mean, one step at a time.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
from numpy.typing import NDArray

from ..monitor import Series, mean_by_step
from ..monitor.records import EMPTY_SERIES
from .downsample import extreme_pairs, finite_points

__all__ = ["Ema", "MinMaxReducer", "StepMean", "Update"]

Floats = NDArray[np.float64]
Ints = NDArray[np.int64]

_EMPTY: Floats = np.empty(0)
#: Largest factor ``weight ** -k`` used inside one EMA block (keeps float64 exact enough).
_EMA_SCALE_LOG = 230.0
_EMA_MAX_BLOCK = 4096


class Update(NamedTuple):
    """What the browser must do with one line: keep its first ``keep`` points, then append.

    ``keep == 0`` replaces the line.
    """

    keep: int
    x: Floats
    y: Floats


class Ema:
    """Exponential moving average with debiasing (TensorBoard's smoothing).

    ``weight`` in ``[0, 1)``; 0 returns values unchanged. The state carries
    over between calls, so smoothing a series in chunks gives the same
    values as smoothing it at once. Non-finite values are returned as they
    are and do not enter the average.
    """

    def __init__(self, weight: float = 0.0) -> None:
        if not 0.0 <= weight < 1.0:
            raise ValueError(f"EMA weight must be in [0, 1), got {weight}")
        self.weight = weight
        self._last = 0.0
        self._count = 0

    def __call__(self, values: Floats) -> Floats:
        """Smoothed ``values`` (a new array)."""
        v = np.asarray(values, dtype=np.float64)
        if self.weight == 0.0 or v.size == 0:
            return v.copy()
        out = v.copy()
        finite = np.isfinite(v)
        if finite.all():
            out[:] = self._smooth(v)
        else:
            out[finite] = self._smooth(v[finite])
        return out

    def _smooth(self, v: Floats) -> Floats:
        """Vectorised in blocks: ``a_k = w^k (w a_-1 + (1-w) sum_i<=k w^-i v_i)``."""
        w = self.weight
        out = np.empty_like(v)
        block = max(1, min(_EMA_MAX_BLOCK, int(_EMA_SCALE_LOG / -math.log(w))))
        for start in range(0, v.size, block):
            chunk = v[start : start + block]
            k = np.arange(chunk.size, dtype=np.float64)
            acc = w * self._last + (1.0 - w) * np.cumsum(chunk * w**-k)
            a = acc * w**k
            self._last = float(a[-1])
            n = self._count + k + 1
            out[start : start + chunk.size] = a / (1.0 - w**n)
            self._count += chunk.size
        return out


class MinMaxReducer:
    """Per-bucket min/max of a growing ``(x, y)`` line within ``budget`` points.

    ``x`` must not decrease across calls. Points with a non-finite ``x`` or
    ``y`` are dropped (a diverged loss ends the line). The first point is
    always kept; the last, incomplete bucket is shown provisionally (its min
    and max so far, and the latest point) and replaced by the next update.
    """

    def __init__(self, budget: int = 2000) -> None:
        if budget < 16:
            raise ValueError(f"budget must be at least 16 points, got {budget}")
        self.budget = budget - budget % 2
        self.bucket = 1
        self._x = _EMPTY
        self._y = _EMPTY
        self._id: Ints = np.empty(0, dtype=np.int64)
        self._next_id = 0
        self._part_x = _EMPTY
        self._part_y = _EMPTY
        self._last_x = _EMPTY
        self._last_y = _EMPTY
        self._prov_len = 0

    @property
    def shown(self) -> int:
        """Points the browser holds for this line after the last update."""
        return self._x.size + self._prov_len

    def push(self, x: Floats, y: Floats) -> Update | None:
        """Add points; the update to send, or ``None`` when nothing changed."""
        xs, ys = finite_points(x, y)
        if xs.size == 0:
            return None
        keep = self._x.size
        if keep == 0 and self._part_x.size == 0:
            # the first point is a group of its own (id -1 stays -1 when groups merge)
            self._x, self._y = xs[:1].copy(), ys[:1].copy()
            self._id = np.array([-1], dtype=np.int64)
            xs, ys = xs[1:], ys[1:]
            if xs.size == 0:
                return Update(0, self._x.copy(), self._y.copy())
        self._last_x, self._last_y = xs[-1:], ys[-1:]
        px = np.concatenate((self._part_x, xs))
        py = np.concatenate((self._part_y, ys))
        reset = False
        if self._need(px.size) > self.budget:
            reset = True
            for _ in range(64):
                if self._need(px.size) <= self.budget // 2:
                    break
                self._double()
        b = self.bucket
        complete = (px.size // b) * b
        rx, ry, rid = _reduce_uniform(px[:complete], py[:complete], b, self._next_id)
        self._next_id += complete // b
        self._x = np.concatenate((self._x, rx))
        self._y = np.concatenate((self._y, ry))
        self._id = np.concatenate((self._id, rid))
        self._part_x, self._part_y = px[complete:], py[complete:]
        qx, qy = self._provisional()
        self._prov_len = qx.size
        if reset:
            keep = 0
        return Update(
            keep, np.concatenate((self._x[keep:], qx)), np.concatenate((self._y[keep:], qy))
        )

    def _provisional(self) -> tuple[Floats, Floats]:
        """Min and max of the incomplete bucket, then the latest point."""
        px, py = self._part_x, self._part_y
        if px.size == 0:
            if self._last_x.size == 0 or (
                self._x.size and self._x[-1] == self._last_x[0] and self._y[-1] == self._last_y[0]
            ):
                return _EMPTY, _EMPTY
            return self._last_x, self._last_y
        pick = extreme_pairs(np.array([int(py.argmin())]), np.array([int(py.argmax())]))
        if pick[-1] != px.size - 1:
            pick = np.append(pick, px.size - 1)
        return px[pick], py[pick]

    def _need(self, raw: int) -> int:
        """Points shown after reducing ``raw`` pending raw points at the current bucket size."""
        return self._x.size + 2 * (raw // self.bucket) + 3

    def _double(self) -> None:
        """Merge neighbouring buckets (ids ``2k`` and ``2k+1``) and double the bucket size."""
        self.bucket *= 2
        if self._x.size == 0:
            return
        ids = self._id >> 1
        pick = _group_extremes(self._y, ids)
        self._x, self._y, self._id = self._x[pick], self._y[pick], ids[pick]
        self._next_id = int(self._id[-1]) + 1


def _reduce_uniform(
    x: Floats, y: Floats, bucket: int, first_id: int
) -> tuple[Floats, Floats, Ints]:
    """Min and max (in x order, one point when they coincide) of each ``bucket`` points.

    ``x.size`` must be a multiple of ``bucket``.
    """
    n = x.size // bucket
    if n == 0:
        return _EMPTY, _EMPTY, np.empty(0, dtype=np.int64)
    if bucket == 1:
        return x.copy(), y.copy(), first_id + np.arange(n, dtype=np.int64)
    grid = y.reshape(n, bucket)
    base = np.arange(n, dtype=np.int64) * bucket
    i_min = base + grid.argmin(axis=1)
    i_max = base + grid.argmax(axis=1)
    pick = extreme_pairs(i_min, i_max)
    ids = first_id + pick // bucket
    return x[pick], y[pick], ids


def _group_extremes(y: Floats, ids: Ints) -> Ints:
    """Positions of each group's first minimum and last maximum, in order.

    ``ids`` must be non-decreasing (groups are contiguous).
    """
    starts = np.flatnonzero(np.r_[True, ids[1:] != ids[:-1]])
    ends = np.r_[starts[1:], ids.size]
    order = np.lexsort((y, ids))
    return extreme_pairs(order[starts], order[ends - 1])


class StepMean:
    """The across-rank mean, released step by step.

    Each rank's new points are added as they arrive; a step's mean is
    released once the caller says every rank still running has reached it
    (:meth:`release` with that step as the frontier). Points for a step that
    was already released are ignored, so the mean at a step is over the
    ranks that had reported it by then. The mean is the monitor's one
    definition (:func:`~jupyter_disttrain.monitor.mean_by_step`: per step,
    each rank's latest point), so the live line matches a rebuilt one.
    """

    def __init__(self) -> None:
        self._pending: dict[int, list[Series]] = {}  # rank -> points of unreleased steps
        self._released = -math.inf

    @property
    def released(self) -> float:
        """The last step released (``-inf`` before any)."""
        return self._released

    def add(self, rank: int, steps: Floats, times: Floats, values: Floats) -> None:
        """Add points of ``rank``."""
        keep = steps > self._released
        if not keep.all():
            steps, times, values = steps[keep], times[keep], values[keep]
        if steps.size:
            self._pending.setdefault(rank, []).append(Series(steps, times, values))

    def release(self, frontier: float) -> tuple[Floats, Floats, Floats]:
        """``(steps, mean times, mean values)`` of pending steps ``<= frontier``, by step."""
        ready = [_split(chunks, frontier) for chunks in self._pending.values()]
        for rank, (_, later) in zip(list(self._pending), ready, strict=True):
            self._pending[rank] = [later] if later.steps.size else []
        mean = mean_by_step([now for now, _ in ready])
        if mean.steps.size:
            self._released = max(self._released, float(mean.steps[-1]))
        return mean.steps, mean.times, mean.values

    def skip_to(self, step: float) -> None:
        """Mark every step ``<= step`` as released without emitting it (after a bulk load)."""
        for rank, chunks in self._pending.items():
            later = _split(chunks, step)[1]
            self._pending[rank] = [later] if later.steps.size else []
        self._released = max(self._released, step)


def _split(chunks: list[Series], step: float) -> tuple[Series, Series]:
    """The points of ``chunks`` at steps ``<= step``, and the later ones."""
    if not chunks:
        return EMPTY_SERIES, EMPTY_SERIES
    joined = Series(*(np.concatenate(column) for column in zip(*chunks, strict=True)))
    now = joined.steps <= step
    return (
        Series(joined.steps[now], joined.times[now], joined.values[now]),
        Series(joined.steps[~now], joined.times[~now], joined.values[~now]),
    )
