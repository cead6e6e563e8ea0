"""What the library integrations share: ranks, the stop decision, numbers from logs."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import Any

from .. import preemption


def rank() -> int:
    """This process's global rank (0 outside a distributed job)."""
    return int(os.environ.get("RANK", "0"))


def _group() -> Any:
    """``torch.distributed`` when a process group of more than one rank is up, else None."""
    dist = sys.modules.get("torch.distributed")
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return None
    return dist if dist.get_world_size() > 1 else None


def stop_agreed() -> bool:
    """Whether the job was asked to stop (SIGTERM), the same answer on every rank.

    Only where SIGTERM is a preemption request (:func:`.preemption.install`);
    then one all-reduce of one number per call, so call it at a step boundary
    every rank reaches (a library's step end).
    """
    if not preemption.installed():
        return False
    mine = preemption.pending()
    dist = _group()
    if dist is None:
        return mine
    import torch

    flag = torch.tensor([1 if mine else 0], dtype=torch.int32)
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    if flag.item() and not mine:
        preemption.agreed()
    return bool(flag.item())


def saved_last(step: int) -> None:
    """After every rank saved its part of a stop's checkpoint: the ranks but 0 exit once
    rank 0 committed it (rank 0 exits in its commit, see :func:`.preemption.checkpoint_saved`)."""
    if rank() != 0:
        preemption.follow_writer()


def barrier() -> None:
    """Wait for every rank (nothing without a process group)."""
    dist = _group()
    if dist is not None:
        dist.barrier()


def numbers(values: Mapping[str, Any]) -> dict[str, float]:
    """The numbers among ``values`` (one-element tensors too), by name; the rest left out."""
    out: dict[str, float] = {}
    for name, value in values.items():
        if isinstance(value, (bool, str)):
            continue
        try:
            item = getattr(value, "item", None)
            out[str(name)] = float(item() if callable(item) else value)
        except (TypeError, ValueError, RuntimeError):
            continue
    return out
