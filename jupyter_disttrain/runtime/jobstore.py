"""The job's own c10d store, as the runtime's threads use it (standard library and torch only)."""

from __future__ import annotations

import os
import sys
from typing import Any


def default_store() -> Any:
    """The default process group's store, or None before (or without) a process group."""
    dist = sys.modules.get("torch.distributed")
    if dist is None or not dist.is_initialized():
        return None
    try:
        from torch.distributed.distributed_c10d import _get_default_store

        return _get_default_store()
    except Exception:
        return None


def round_key(area: str, what: str) -> str:
    """A store key of ``area`` for this round of workers (restarts do not meet old keys)."""
    return f"distrain/{area}/{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}/{what}"
