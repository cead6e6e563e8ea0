"""What the autolog job tests share: run a cell as a real job, read a metric back."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from jupyter_disttrain.runtime.integrations import common
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


def save_step_bounds(steps_file: Path, killed_at: float, delay: float) -> tuple[int, int]:
    """The steps between which a preempted job's agreed save must fall: rank 0's last step
    ended before the signal (from the ``STEP TIME`` lines the cell wrote to ``steps_file``,
    not the metric lines read by then, which may lag under load), and that plus the steps of
    one vote interval (``common.VOTE_SECONDS``; a step takes ``delay`` or more) and two."""
    ended = [line.split() for line in steps_file.read_text().splitlines()]
    signalled_after = max(int(step) for step, t in ended if float(t) <= killed_at)
    return signalled_after, signalled_after + 2 + math.ceil(common.VOTE_SECONDS / delay)
