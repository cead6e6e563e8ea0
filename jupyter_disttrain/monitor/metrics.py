"""MetricStore: every reported metric of a job, per (name, rank) series and per event.

Pure storage; not locked by itself: the :class:`~.core.JobMonitor` that owns a
store passes its own lock, and every method takes it (it is re-entrant).
Series only grow; readers get copies.
"""

from __future__ import annotations

import threading
from array import array
from collections.abc import Iterable
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ..runtime.numbers import extremes, is_number, json_float, mean
from .records import (
    EMPTY_SERIES,
    JSONFloat,
    MetricRow,
    PointColumns,
    Series,
    latest_by_step,
    mean_by_step,
)


class MetricStore:
    """Metric points by name and rank, plus one row per metric event (for tables)."""

    def __init__(self, lock: threading.RLock) -> None:
        self._lock = lock
        self._points: dict[str, dict[int, PointColumns]] = {}
        self._ev_rank = array("q")
        self._ev_step = array("d")
        self._ev_t = array("d")
        self._ev_names = array("q")
        self._name_sets: list[tuple[str, ...]] = []
        self._name_set_ids: dict[tuple[str, ...], int] = {}

    def add(self, rank: int, step: int, t: float, values: Any) -> None:
        """Record one ``metric`` event; non-numeric values are left out."""
        self.add_many(((rank, step, t, values),))

    def add_many(self, events: Iterable[tuple[int, int, float, Any]]) -> None:
        """Record ``metric`` events given as ``(rank, step, t, values)``, in order (as
        :meth:`add` each)."""
        by_name, set_ids = self._points, self._name_set_ids
        ranks: list[int] = []
        steps: list[int] = []
        times: list[float] = []
        sets: list[int] = []
        with self._lock:
            for rank, step, t, values in events:
                names: list[str] = []
                if isinstance(values, dict):
                    for name, value in values.items():
                        if isinstance(name, str) and is_number(value):
                            by_rank = by_name.get(name)
                            if by_rank is None:
                                by_rank = by_name[name] = {}
                            points = by_rank.get(rank)
                            if points is None:
                                points = by_rank[rank] = PointColumns()
                            points.steps.append(step)
                            points.times.append(t)
                            points.values.append(float(value))
                            names.append(name)
                key = tuple(names)
                set_id = set_ids.get(key)
                if set_id is None:
                    set_id = set_ids[key] = len(self._name_sets)
                    self._name_sets.append(key)
                ranks.append(rank)
                steps.append(step)
                times.append(t)
                sets.append(set_id)
            self._ev_rank.extend(ranks)
            self._ev_step.extend(steps)
            self._ev_t.extend(times)
            self._ev_names.extend(sets)

    def names(self) -> list[str]:
        """Metric names in order of first appearance."""
        with self._lock:
            return list(self._points)

    def ranks(self, name: str) -> list[int]:
        """Ranks that reported ``name``, sorted."""
        with self._lock:
            return sorted(self._points.get(name, {}))

    def length(self, name: str, rank: int) -> int:
        """Number of points of ``name`` from ``rank``."""
        with self._lock:
            points = self._points.get(name, {}).get(rank)
            return 0 if points is None else len(points)

    def series(self, name: str, rank: int, *, by_step: bool = False) -> Series:
        """All points of ``name`` from ``rank`` (one per step, the latest, with ``by_step``)."""
        with self._lock:
            points = self._points.get(name, {}).get(rank)
            series = EMPTY_SERIES if points is None else points.slice()
        return latest_by_step(series) if by_step else series

    def since(self, name: str, rank: int, index: int) -> Series:
        """Points from position ``index`` on."""
        with self._lock:
            points = self._points.get(name, {}).get(rank)
            return EMPTY_SERIES if points is None else points.slice(max(0, index))

    def mean(self, name: str) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """``(steps, means)``: per step, the mean of each rank's latest value for it."""
        with self._lock:
            per_rank = [points.slice() for points in self._points.get(name, {}).values()]
        mean = mean_by_step(per_rank)
        return mean.steps, mean.values

    def table(self) -> list[dict[str, float | int]]:
        """One row per metric event: ``rank``, ``step``, ``t`` and each reported value."""
        cols, present = self.columns_and_presence()
        base = zip(cols["rank"].tolist(), cols["step"].tolist(), cols["t"].tolist(), strict=True)
        rows: list[dict[str, float | int]] = [{"rank": r, "step": s, "t": t} for r, s, t in base]
        for name, mask in present.items():
            values = cols[name].tolist()
            for i in np.flatnonzero(mask).tolist():
                rows[i][name] = values[i]
        return rows

    def columns_and_presence(
        self,
    ) -> tuple[dict[str, NDArray[Any]], dict[str, NDArray[np.bool_]]]:
        """Columns (NaN where an event lacks a metric) plus, per metric, which events carry it.

        The k-th event of rank r that carries a metric holds the k-th point of
        that metric's (name, r) series, so a stable sort of those events by
        rank lines them up with the series concatenated in rank order.
        """
        with self._lock:
            ranks = np.frombuffer(self._ev_rank, dtype=np.int64).copy()
            set_ids = np.frombuffer(self._ev_names, dtype=np.int64)
            cols: dict[str, NDArray[Any]] = {
                "rank": ranks,
                "step": np.frombuffer(self._ev_step, dtype=np.float64).astype(np.int64),
                "t": np.frombuffer(self._ev_t, dtype=np.float64).copy(),
            }
            present: dict[str, NDArray[np.bool_]] = {}
            for name, by_rank in self._points.items():
                has = np.array([name in names for names in self._name_sets], dtype=bool)
                mask = has[set_ids]
                where = np.flatnonzero(mask)
                order = where[np.argsort(ranks[where], kind="stable")]
                column = np.full(ranks.size, np.nan)
                column[order] = np.concatenate(
                    [np.frombuffer(by_rank[r].values, dtype=np.float64) for r in sorted(by_rank)]
                )
                cols[name] = column
                present[name] = mask
            return cols, present

    def latest_values(self) -> dict[int, dict[str, JSONFloat]]:
        """Per rank, the last value of each metric."""
        with self._lock:
            out: dict[int, dict[str, JSONFloat]] = {}
            for name, by_rank in self._points.items():
                for rank, points in by_rank.items():
                    out.setdefault(rank, {})[name] = json_float(points.values[-1])
            return out

    def latest_of(self, name: str) -> dict[int, float]:
        """Per rank that reported ``name``, its last value."""
        with self._lock:
            return {rank: p.values[-1] for rank, p in self._points.get(name, {}).items()}

    def rows(self) -> dict[str, MetricRow]:
        """Per metric: latest step, and mean/min/max of the ranks' latest values."""
        with self._lock:
            rows: dict[str, MetricRow] = {}
            for name, by_rank in self._points.items():
                values = [points.values[-1] for points in by_rank.values()]
                low, high = extremes(values)
                step = max(int(points.steps[-1]) for points in by_rank.values())
                rows[name] = MetricRow(
                    step=step,
                    mean=json_float(mean(values)),
                    min=json_float(low),
                    max=json_float(high),
                    ranks=len(values),
                )
            return rows
