"""Settings a worker reads from its environment (standard library only)."""

from __future__ import annotations

import os


def seconds(name: str, default: float, least: float = 0.0) -> float:
    """``$name`` as seconds, at least ``least``; ``default`` when unset or not a number."""
    try:
        return max(least, float(os.environ.get(name, default)))
    except ValueError:
        return default
