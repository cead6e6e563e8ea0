"""Downsampling of long metric series for plotting (pure numpy).

Both functions take ``x`` sorted ascending (not checked) and return at most
``n_out`` points that always include the first and the last point.

NaN handling: points whose ``x`` or ``y`` is not finite (NaN, +-inf) are
dropped before anything else, so a diverged loss ends the curve instead of
poisoning neighbouring buckets. When ``n_out`` is at least the number of
remaining points they are returned as they are (as float64 arrays that may
share memory with the input: do not mutate them).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

__all__ = ["lttb", "minmax"]

Floats = NDArray[np.float64]

#: Buckets of at most this many points use the vectorised choice table (work
#: ~ n * bucket size); larger buckets a Python loop (work ~ n_out calls).
_TABLE_MAX_BUCKET = 16


def lttb(x: ArrayLike, y: ArrayLike, n_out: int) -> tuple[Floats, Floats]:
    """Largest-Triangle-Three-Buckets (Steinarsson 2013) down to ``n_out`` points.

    The interior points are split into ``n_out - 2`` buckets with integer
    boundaries ``1 + i * (n - 2) // (n_out - 2)``; from each bucket the point
    forming the largest triangle with the previously kept point and the mean
    of the next bucket is kept (the first such point on ties): the classic
    sequential algorithm's result, up to rounding in near-ties. O(n) numpy
    work plus a Python step per bucket for large buckets, or O(n * bucket
    size) vectorised work for buckets of at most 16 points. Raises
    ``ValueError`` for ``n_out < 2`` or mismatched inputs.
    """
    xs, ys = _prepare(x, y, n_out)
    n = xs.size
    if n_out >= n:
        return xs, ys
    if n_out == 2:
        return xs[[0, -1]], ys[[0, -1]]
    nb = n_out - 2
    x0 = xs - xs[0]  # translation-invariant; keeps the products well conditioned
    edges = 1 + (np.arange(nb + 1, dtype=np.int64) * (n - 2)) // nb
    starts = edges[:-1]
    sizes = np.diff(edges)
    # Mean of each bucket; the "next" point of the last bucket is the last point.
    mean_x = np.add.reduceat(x0[1 : n - 1], starts - 1) / sizes
    mean_y = np.add.reduceat(ys[1 : n - 1], starts - 1) / sizes
    cx = np.append(mean_x[1:], x0[n - 1])
    cy = np.append(mean_y[1:], ys[n - 1])
    solve = _lttb_table if int(sizes.max()) <= _TABLE_MAX_BUCKET else _lttb_loop
    picked = solve(x0, ys, edges, cx, cy)
    keep = np.concatenate(([0], picked, [n - 1]))
    return xs[keep], ys[keep]


def _lttb_loop(
    x: Floats, y: Floats, edges: NDArray[np.int64], cx: Floats, cy: Floats
) -> NDArray[np.int64]:
    """Sequential LTTB, one bucket per iteration on contiguous slices.

    Uses the same arithmetic as :func:`_lttb_table`, so both pick the same points.
    """
    nb = edges.size - 1
    bounds = edges.tolist()
    cxs = cx.tolist()
    cys = cy.tolist()
    buf = np.empty(int(np.diff(edges).max()))
    tmp = np.empty_like(buf)
    out = [0] * nb
    ax, ay = float(x[0]), float(y[0])
    for i in range(nb):
        start, end = bounds[i], bounds[i + 1]
        dx = ax - cxs[i]
        dy = cys[i] - ay
        # area(k) = |dx * py_k + dy * px_k + g|
        area = np.multiply(dx, y[start:end], out=buf[: end - start])
        area += np.multiply(dy, x[start:end], out=tmp[: end - start])
        area += -dx * ay - ax * dy
        j = start + int(np.abs(area, out=area).argmax())
        out[i] = j
        ax, ay = float(x[j]), float(y[j])
    return np.asarray(out, dtype=np.int64)


def _lttb_table(
    x: Floats, y: Floats, edges: NDArray[np.int64], cx: Floats, cy: Floats
) -> NDArray[np.int64]:
    """LTTB for small buckets: the best pick for every possible previous pick.

    ``choice[i, j]`` is the offset picked in bucket ``i`` when offset ``j`` of
    bucket ``i - 1`` was kept (bucket ``-1`` is the first point alone), all
    computed at once in an (offset, bucket) layout so that every operation
    runs over long contiguous rows; :func:`_follow` then walks the chain.
    """
    idx = _padded_index(edges)  # (width, buckets)
    width, nb = idx.shape
    px = x[idx]
    py = y[idx]
    ax = np.empty_like(px)
    ay = np.empty_like(py)
    ax[:, 0] = x[0]
    ay[:, 0] = y[0]
    ax[:, 1:] = px[:, :-1]
    ay[:, 1:] = py[:, :-1]
    # area(j, k) = |dx_j * py_k + dy_j * px_k + g_j|
    dx = ax - cx
    dy = cy - ay
    g = -dx * ay
    g -= ax * dy
    best = np.full((width, nb), -1.0)
    choice = np.zeros((width, nb), dtype=np.int64)
    area = np.empty((width, nb))
    tmp = np.empty((width, nb))
    better = np.empty((width, nb), dtype=bool)
    marks = np.empty((width, nb), dtype=np.int64)
    for k in range(width):
        np.multiply(dx, py[k], out=area)
        area += np.multiply(dy, px[k], out=tmp)
        area += g
        np.abs(area, out=area)
        # Strict: the first maximum wins, so a padding copy never beats its original.
        np.greater(area, best, out=better)
        np.maximum(best, area, out=best)
        # k only grows, so "choice = k where better" is a maximum (copyto is slow)
        np.maximum(choice, np.multiply(better, k, out=marks), out=choice)
    return edges[:-1] + _follow(choice.T)


def _follow(choice: NDArray[np.int64], block: int = 64) -> NDArray[np.int64]:
    """``picks[i] = choice[i, picks[i - 1]]`` from state 0, mostly vectorised.

    Each block of ``block`` rows is first applied to every possible entry
    state at once; the Python walk then only steps from block to block.
    """
    nb, width = choice.shape
    nblk = -(-nb // block)
    table = np.empty((nblk * block, width), dtype=np.int64)
    table[:nb] = choice
    table[nb:] = np.arange(width)  # identity rows after the end
    blocks = table.reshape(nblk, block, width)
    rows = np.arange(nblk)[:, None]
    state = np.broadcast_to(np.arange(width), (nblk, width))
    for r in range(block):
        state = blocks[:, r, :][rows, state]
    exits = state.tolist()
    entry = [0] * nblk
    s = 0
    for k in range(nblk):
        entry[k] = s
        s = exits[k][s]
    cur = np.asarray(entry, dtype=np.int64)
    flat_rows = np.arange(nblk)
    picks = np.empty((nblk, block), dtype=np.int64)
    for r in range(block):
        cur = blocks[flat_rows, r, cur]
        picks[:, r] = cur
    return picks.ravel()[:nb]


def minmax(x: ArrayLike, y: ArrayLike, n_out: int) -> tuple[Floats, Floats]:
    """Keep the minimum and maximum ``y`` of each bucket, in ``x`` order.

    The interior points are split into ``(n_out - 2) // 2`` buckets (same
    integer boundaries as :func:`lttb`); each contributes its first minimum
    and its first maximum (one point if they coincide), so every bucket's
    extremes survive and the output has at most ``n_out`` points. Raises
    ``ValueError`` for ``n_out < 2`` or mismatched inputs.
    """
    xs, ys = _prepare(x, y, n_out)
    n = xs.size
    if n_out >= n:
        return xs, ys
    nb = (n_out - 2) // 2
    if nb == 0:
        return xs[[0, -1]], ys[[0, -1]]
    edges = 1 + (np.arange(nb + 1, dtype=np.int64) * (n - 2)) // nb
    idx = _padded_index(edges)
    block = ys[idx]
    cols = np.arange(nb)
    i_min = idx[block.argmin(axis=0), cols]
    i_max = idx[block.argmax(axis=0), cols]
    keep = np.concatenate(([0], extreme_pairs(i_min, i_max), [n - 1]))
    return xs[keep], ys[keep]


def extreme_pairs(a: NDArray[np.int64], b: NDArray[np.int64]) -> NDArray[np.int64]:
    """Each bucket's two extremes' positions ``a[i]``, ``b[i]`` in order, one when equal: what
    a min/max reduction keeps (:func:`minmax`, the live traces' buckets)."""
    lo = np.minimum(a, b)
    hi = np.maximum(a, b)
    pick: NDArray[np.int64] = np.stack((lo, hi), axis=1).ravel()
    keep = np.stack((np.ones(lo.size, dtype=bool), hi != lo), axis=1).ravel()
    out: NDArray[np.int64] = pick[keep]
    return out


def _prepare(x: ArrayLike, y: ArrayLike, n_out: int) -> tuple[Floats, Floats]:
    """Validated float64 1-D arrays with the non-finite points removed."""
    if n_out < 2:
        raise ValueError(f"n_out must be at least 2, got {n_out}")
    return finite_points(x, y)


def finite_points(x: ArrayLike, y: ArrayLike) -> tuple[Floats, Floats]:
    """``x`` and ``y`` as float64 1-D arrays of equal length, without the points a plot
    cannot place (``x`` or ``y`` NaN or infinite; their values stay in the tables)."""
    xs = np.asarray(x, dtype=np.float64)
    ys = np.asarray(y, dtype=np.float64)
    if xs.ndim != 1 or xs.shape != ys.shape:
        raise ValueError(f"x and y must be 1-D of equal length, got {xs.shape} and {ys.shape}")
    finite = np.isfinite(xs) & np.isfinite(ys)
    return (xs, ys) if finite.all() else (xs[finite], ys[finite])


def _padded_index(edges: NDArray[np.int64]) -> NDArray[np.int64]:
    """``(width, buckets)`` point indices of each bucket ``[edges[i], edges[i+1])``.

    Short buckets are padded with their last index; a first-maximum or
    first-minimum search over a column therefore never returns a padding slot.
    """
    width = int(np.diff(edges).max())
    offsets = np.arange(width, dtype=np.int64)[:, None]
    idx: NDArray[np.int64] = np.minimum(edges[:-1] + offsets, edges[1:] - 1)
    return idx
