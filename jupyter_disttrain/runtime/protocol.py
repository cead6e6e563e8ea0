"""The worker -> notebook line protocol, worker side (stdlib only).

A structured line is ``##distrain {"v":1,"kind":KIND,"rank":R,"t":T, ...}``.
Every other line a worker prints is a plain log line. The notebook side
parses these lines in :mod:`jupyter_disttrain.events`.
"""

from __future__ import annotations

import json
import time
from typing import Any

PREFIX = "##distrain "
VERSION = 1
KINDS = (
    "hello",
    "metric",
    "checkpoint",
    "result",
    "error",
    "done",
    "stacks",
    "staging",
    "session",
    "cell",
)


def encode(kind: str, rank: int | None, **fields: Any) -> str:
    """One protocol line (no trailing newline) for ``kind`` from ``rank`` (None: job-wide)."""
    if kind not in KINDS:
        raise ValueError(f"unknown protocol kind {kind!r}")
    body = {"v": VERSION, "kind": kind, "rank": rank, "t": round(time.time(), 6)}
    body.update(fields)
    return PREFIX + json.dumps(body, separators=(",", ":"), allow_nan=True)
