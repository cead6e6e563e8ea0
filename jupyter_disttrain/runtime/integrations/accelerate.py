"""Accelerate: ``accelerator.log(values, step=...)`` reaches the job, whatever ``log_with`` says.

Attached when ``accelerate`` is imported: ``Accelerator.log`` is wrapped so
that its numbers go out as metrics at ``step`` (one more than the previous
call's when it gives none) from every rank, then Accelerate's own trackers
get them as before.
"""

from __future__ import annotations

import functools
from types import ModuleType
from typing import Any

from .. import report
from . import Integration, common

_next_step = 0


def attach(module: ModuleType) -> None:
    """Wrap ``Accelerator.log``."""
    accelerator = module.Accelerator
    log = accelerator.log

    @functools.wraps(log)
    def log_(self: Any, values: Any, step: Any = None, *args: Any, **kwargs: Any) -> Any:
        global _next_step
        try:
            at = _next_step if step is None else int(step)
            _next_step = at + 1
            report.auto_metrics(at, common.numbers(dict(values or {})))
        except Exception as exc:  # never the cause of a failed job
            from . import warn

            warn("accelerate.log", f"autolog: accelerator.log values not reported: {exc!r}")
        return log(self, values, step, *args, **kwargs)

    accelerator.log = log_


INTEGRATION = Integration(
    name="accelerate",
    library="accelerate",
    watches=("accelerate",),
    oldest=(0, 30),
    below=(2, 0),
    attach=attach,
    mentions=("accelerate",),
)
