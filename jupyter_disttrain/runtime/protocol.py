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
KINDS = ("hello", "metric", "checkpoint", "result", "error", "done", "stacks", "staging",
         "resources", "progress", "session", "cell")  # fmt: skip
#: Kinds a rank sends on a clock of its own: no sign of activity (hang detection, "heard").
QUIET_KINDS = ("resources",)
#: How a quiet kind's line starts (:func:`encode` writes ``v`` and ``kind`` first).
QUIET_MARKERS = tuple(f'{PREFIX}{{"v":{VERSION},"kind":"{k}"'.encode() for k in QUIET_KINDS)


def encode(kind: str, rank: int | None, **fields: Any) -> str:
    """One protocol line (no trailing newline) for ``kind`` from ``rank`` (None: job-wide)."""
    if kind not in KINDS:
        raise ValueError(f"unknown protocol kind {kind!r}")
    body = {"v": VERSION, "kind": kind, "rank": rank, "t": round(time.time(), 6)}
    body.update(fields)
    return PREFIX + json.dumps(body, separators=(",", ":"), allow_nan=True)


def is_quiet(line: bytes) -> bool:
    """True when ``line`` holds a protocol line of a quiet kind (see :data:`QUIET_KINDS`)."""
    return any(marker in line for marker in QUIET_MARKERS)
