"""Per-rank resource figures and the job's progress (pure helpers of the monitor).

``resources`` events set a rank's latest figures (:func:`apply_resources`);
:func:`resource_outliers` names the ranks whose CPU or memory is far above
the others'. ``progress`` events feed a :class:`ProgressTracker`, which
gives the snapshot's ``progress`` (rate over the last minute, ETA).
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from collections.abc import Callable, Sequence
from typing import Final

from ..events import ResourcesFields
from ..units import format_bytes
from .records import ProgressRow, RankRow, RankState, as_int

#: The resource fields of a rank row, in the order the tables show them.
RESOURCE_FIELDS: Final = (
    "cpu_pct",
    "rss_bytes",
    "mem_limit_bytes",
    "gpu_util_pct",
    "gpu_mem_bytes",
)
#: Seconds of progress the rate (and so the ETA) is measured over.
PROGRESS_WINDOW: Final = 60.0
_MIB: Final = 1024 * 1024


def _float(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) and value >= 0 else None


def _count(value: object) -> int | None:
    n = as_int(value)
    return n if n is not None and n >= 0 else None


def apply_resources(row: RankState, f: ResourcesFields) -> None:
    """Set ``row``'s figures from one ``resources`` event (a missing field becomes None)."""
    row.cpu_pct = _float(f.get("cpu_pct"))
    row.rss_bytes = _count(f.get("rss_bytes"))
    row.mem_limit_bytes = _count(f.get("mem_limit_bytes"))
    row.gpu_util_pct = _float(f.get("gpu_util_pct"))
    row.gpu_mem_bytes = _count(f.get("gpu_mem_bytes"))


def clear_resources(row: RankState) -> None:
    """Forget ``row``'s figures (its processes were replaced)."""
    row.cpu_pct = row.gpu_util_pct = None
    row.rss_bytes = row.mem_limit_bytes = row.gpu_mem_bytes = None


def pct(value: float) -> str:
    """``97%``, ``3.5%``."""
    return f"{value:.0f}%" if value >= 10 else f"{value:.1f}%"


#: ``(field, label, format, least excess, least ratio)``: a rank is far above the
#: median of the other running ranks when it exceeds it by both.
_OUTLIER_RULES: Final[tuple[tuple[str, str, Callable[[float], str], float, float], ...]] = (
    ("cpu_pct", "CPU", pct, 50.0, 2.0),
    ("rss_bytes", "memory", lambda v: format_bytes(int(v)), 128 * _MIB, 1.5),
    ("gpu_mem_bytes", "GPU memory", lambda v: format_bytes(int(v)), 1024 * _MIB, 1.5),
)


def resource_outliers(rows: Sequence[RankRow]) -> dict[int, str]:
    """Running ranks whose CPU or memory is far above the others', with why.

    ``{rank: "CPU 98% and memory 512.0 MB, far above the others (median 1.0%, 180.0 MB)"}``.
    """
    found: dict[int, list[tuple[str, str, str]]] = {}
    running = [r for r in rows if r["state"] == "Running"]
    for key, label, fmt, excess, ratio in _OUTLIER_RULES:
        values = {r["rank"]: float(v) for r in running if isinstance(v := r.get(key), int | float)}
        if len(values) < 2:
            continue
        for rank, value in values.items():
            others = statistics.median(v for r, v in values.items() if r != rank)
            if value - others >= excess and value >= ratio * others:
                found.setdefault(rank, []).append((label, fmt(value), fmt(others)))
    return {
        rank: " and ".join(f"{label} {value}" for label, value, _ in parts)
        + ", far above the others (median "
        + ", ".join(median for _, _, median in parts)
        + ")"
        for rank, parts in sorted(found.items())
    }


class ProgressTracker:
    """Rank 0's progress: the latest ``(step, total)`` and the points of the last minute."""

    def __init__(self, window: float = PROGRESS_WINDOW) -> None:
        self.window = window
        self.total: int | None = None
        self.points: deque[tuple[float, int]] = deque(maxlen=4096)

    def add(self, t: float, step: object, total: object) -> None:
        """One ``progress`` event (bad fields are ignored; a new total or a step back restarts)."""
        done, steps = _count(step), _count(total)
        if done is None or steps is None or steps < 1:
            return
        points = self.points
        if steps != self.total or (points and done < points[-1][1]):
            points.clear()
            self.total = steps
        if points and points[-1] == (t, done):
            return  # the same line twice (rank 0 relays; a pod log repeats)
        points.append((t, done))
        while len(points) > 2 and t - points[1][0] >= self.window:
            points.popleft()

    def clear(self) -> None:
        """Forget the rate (the workers restarted); the last count stays until new ones."""
        if self.points:
            last = self.points[-1]
            self.points.clear()
            self.points.append(last)

    def row(self, ended: bool) -> ProgressRow | None:
        """The snapshot's ``progress`` (``eta_s`` None once the job ``ended``)."""
        if self.total is None or not self.points:
            return None
        total = self.total
        (t0, s0), (t1, s1) = self.points[0], self.points[-1]
        step = min(s1, total)
        rate = (s1 - s0) / (t1 - t0) if t1 > t0 and s1 > s0 else None
        eta: float | None = None
        if step >= total:
            eta = 0.0
        elif rate is not None and not ended:
            eta = (total - step) / rate
        return ProgressRow(
            step=step, total=total, fraction=step / total, eta_s=eta, rate_per_s=rate
        )
