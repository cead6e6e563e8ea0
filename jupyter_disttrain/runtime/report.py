"""``report(step=..., **metrics)``: send metrics from a worker to the notebook."""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable
from typing import Any

from .protocol import encode

_lock = threading.Lock()
_auto_step = 0
#: Protocol lines written so far (a rank's activity, read by the hang watch).
emitted = 0
_tap: Callable[[str], None] | None = None
#: Called with every protocol line this process writes or relays (rank 0's metrics endpoint).
_observers: list[Callable[[str], None]] = []


def rank() -> int:
    """This process's global rank (0 outside a distributed job)."""
    return int(os.environ.get("RANK", "0"))


def emit(kind: str, **fields: Any) -> None:
    """Write one protocol line to stdout and flush it."""
    emit_as(rank(), kind, **fields)


def emit_as(rank: int, kind: str, **fields: Any) -> None:
    """Write one protocol line on behalf of ``rank`` (rank 0 relays others' lines)."""
    global emitted
    line = encode(kind, rank, **fields) + "\n"
    with _lock:
        emitted += 1
        sys.stdout.write(line)
        sys.stdout.flush()
        if _tap is not None:
            _tap(line)
        for observer in _observers:
            observer(line)


def set_tap(tap: Callable[[str], None] | None) -> None:
    """Also hand every protocol line this process writes to ``tap`` (the relay), or stop."""
    global _tap
    with _lock:
        _tap = tap


def add_observer(observer: Callable[[str], None]) -> None:
    """Also hand every protocol line written or relayed here to ``observer`` (must not block)."""
    with _lock:
        _observers.append(observer)


def write_lines(lines: list[str], *, echo: bool = True) -> None:
    """Write lines other ranks sent (already protocol lines) to this process's stdout.

    ``echo`` False: only observe them (their own rank wrote them to this log already).
    """
    global emitted
    with _lock:
        emitted += 1
        if echo:
            sys.stdout.write("".join(f"{line}\n" for line in lines if line))
            sys.stdout.flush()
        for observer in _observers:
            for line in lines:
                if line:
                    observer(line)


def _as_float(name: str, value: Any) -> float:
    item = getattr(value, "item", None)
    if callable(item):  # a 0-d tensor or numpy scalar
        value = item()
    try:
        out = float(value)
    except (TypeError, ValueError):
        raise TypeError(
            f"report(): metric {name!r} must be a number or a one-element tensor, "
            f"got {type(value).__name__}"
        ) from None
    return out


def report(step: int | None = None, **metrics: Any) -> None:
    """Report ``metrics`` (name -> number) at ``step`` from this rank.

    ``step`` defaults to one more than the previous call's. Values may be
    Python numbers, numpy scalars or one-element tensors. Each call emits one
    ``metric`` line of the line protocol.
    """
    global _auto_step
    if not metrics:
        raise TypeError("report() needs at least one metric, e.g. report(step=i, loss=loss)")
    if step is None:
        step = _auto_step
    elif isinstance(step, bool) or not isinstance(step, int):
        item = getattr(step, "item", None)
        step = int(item() if callable(item) else step)
    _auto_step = step + 1
    values = {str(k): _as_float(k, v) for k, v in metrics.items()}
    emit("metric", step=step, values=values)
