"""What the autolog job tests share: run a cell as a real job, read a metric back."""

from __future__ import annotations

from typing import Any

from jupyter_disttrain.service import JobService
from tests.test_service import parse


def values(job: Any, rank: int, name: str) -> dict[int, float]:
    """``name`` by step as ``rank`` reported it (the rows of ``job.metrics()``)."""
    return {
        int(row["step"]): float(row[name])
        for row in job.metrics()
        if row["rank"] == rank and row.get(name) is not None
    }


def run_cell(service: JobService, argv: list[str], cell: str, names: dict[str, Any]) -> Any:
    """Start ``cell`` with the job options ``argv`` and the notebook values ``names``."""
    spec = service.spec(parse(*argv))
    return service.run(service.plan(spec, cell, names))
