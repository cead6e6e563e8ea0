"""Settings a worker reads from its environment (standard library only)."""

from __future__ import annotations

import os
from collections.abc import MutableMapping

#: The job's name, in every worker of it.
ENV_JOB_ID = "DISTRAIN_JOB_ID"
#: The job's submission: new at every run of it (a restart keeps it).
ENV_RUN_ID = "DISTRAIN_RUN_ID"


def seconds(name: str, default: float, least: float = 0.0) -> float:
    """``$name`` as seconds, at least ``least``; ``default`` when unset or not a number."""
    try:
        return max(least, float(os.environ.get(name, default)))
    except ValueError:
        return default


def one_process_per_node(environ: MutableMapping[str, str], rank: int, world: int) -> None:
    """Set the torchrun-style rank variables of a worker that is its node's only process
    (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``, ``GROUP_RANK``)."""
    environ.update(
        RANK=str(rank),
        WORLD_SIZE=str(world),
        LOCAL_RANK="0",
        LOCAL_WORLD_SIZE="1",
        GROUP_RANK=str(rank),
    )
