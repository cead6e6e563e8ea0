"""Progress a job reports in its own object (Kubeflow Trainer's ``status.trainerStatus``): pure.

Any process of a TrainJob can post it (the product's rank 0, or a foreign job's
own code), so it is read as display data only: a percentage, a remaining time
and named metrics, never a state. Values that are not of the documented shape
are left out.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Reported:
    """What a job's object says of its progress.

    ``percent`` 0-100 or None; ``eta`` seconds left or None; ``metrics`` the
    numeric metrics by name (text values are dropped: they cannot be drawn);
    ``updated`` the report's time as written ("" when absent): a new value means
    a new report.
    """

    percent: int | None = None
    eta: int | None = None
    metrics: dict[str, float] = field(default_factory=dict)
    updated: str = ""


def _number(value: Any) -> float | None:
    try:
        out = float(str(value))
    except ValueError:
        return None
    return out if math.isfinite(out) else None


def read_reported(block: Any) -> Reported | None:
    """The :class:`Reported` of a ``trainerStatus``-shaped mapping; None when there is none."""
    if not isinstance(block, Mapping) or not block:
        return None
    percent, eta = block.get("progressPercentage"), block.get("estimatedRemainingSeconds")
    metrics: dict[str, float] = {}
    for item in block.get("metrics") or []:
        if isinstance(item, Mapping) and isinstance(item.get("name"), str) and item["name"]:
            number = _number(item.get("value"))
            if number is not None:
                metrics[item["name"]] = number
    return Reported(
        percent=percent if isinstance(percent, int) and 0 <= percent <= 100 else None,
        eta=eta if isinstance(eta, int) and eta >= 0 else None,
        metrics=metrics,
        updated=str(block.get("lastUpdatedTime") or ""),
    )
