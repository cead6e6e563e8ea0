"""``report(step=..., **metrics)``: send metrics from a worker to the notebook."""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, Final, Protocol

from . import jobkey
from .observed import Observed, from_line, observed
from .protocol import QUIET_KINDS, encode, is_quiet, relayed

_lock = threading.Lock()
#: Held while a protocol line is written (the hang watch reads the log's size under it).
lock: Final = _lock
_auto_step = 0
#: Protocol lines written so far (a rank's activity, read by the hang watch); quiet ones not.
emitted = 0
#: Bytes of quiet lines (:data:`~.protocol.QUIET_KINDS`) written to stdout so far.
quiet_bytes = 0
#: Seconds between two ``progress`` lines (the last step of a run is always sent).
PROGRESS_EVERY: Final = 0.5
_progress_sent = -PROGRESS_EVERY
_progress_pending: tuple[int, int] | None = None
_progress_lock = threading.RLock()
_progress_timer: threading.Timer | None = None
#: True once ``report(total=...)`` was called (it then wins over a tqdm bar and autolog).
explicit_total = False
#: True once the cell called ``report()`` with metrics: autolog's metric lines stop then.
own_metrics = False
#: True once a library integration (autolog) sent progress: it then wins over a tqdm bar.
library_total = False
_tap: Callable[[str], None] | None = None
#: Called with every protocol line this process writes or relays (rank 0's metrics endpoint).
_observers: list[Callable[[Observed], None]] = []


class LineOut(Protocol):
    """Where protocol lines are written: each ``write`` a whole line (or lines)."""

    def write(self, text: str, /) -> int: ...

    def flush(self) -> None: ...


#: Where protocol lines go (a worker's stream of their own); None: ``sys.stdout`` at each write.
_protocol_out: LineOut | None = None


def rank() -> int:
    """This process's global rank (0 outside a distributed job)."""
    return int(os.environ.get("RANK", "0"))


def emit(kind: str, **fields: Any) -> None:
    """Write one protocol line to stdout and flush it."""
    emit_as(rank(), kind, **fields)


def emit_as(rank: int, kind: str, **fields: Any) -> None:
    """Write one protocol line on behalf of ``rank`` (rank 0 relays others' lines)."""
    global emitted, quiet_bytes
    line = encode(kind, rank, sign_with=jobkey.signer(), **fields) + "\n"
    with _lock:
        if kind in QUIET_KINDS:
            quiet_bytes += len(line)  # ASCII: json.dumps escapes the rest
        else:
            emitted += 1
        out = _out()
        out.write(line)
        out.flush()
        if _tap is not None:
            _tap(line)
        seen = observed(kind, rank, fields) if _observers else None
        if seen is not None:  # what this process signed, not read back
            for observer in _observers:
                observer(seen)


def write_protocol_to(stream: LineOut | None) -> None:
    """Write protocol lines to ``stream`` from now on (None: to ``sys.stdout`` as it is then).

    A worker gives them a stream of their own on its stdout's file (see
    :func:`~.worker.own_protocol_stream`): a line another thread writes then never
    lands inside a line the cell is printing.
    """
    global _protocol_out
    with _lock:
        _protocol_out = stream


def _out() -> LineOut:
    return sys.stdout if _protocol_out is None else _protocol_out


def set_tap(tap: Callable[[str], None] | None) -> None:
    """Also hand every protocol line this process writes to ``tap`` (the relay), or stop."""
    global _tap
    with _lock:
        _tap = tap


def add_observer(observer: Callable[[Observed], None]) -> None:
    """Also hand every protocol line written or relayed here to ``observer`` (must not block),
    as an :class:`~.observed.Observed`: this process's own lines as it signed them, relayed
    ones verified with the job key and parsed once for every observer."""
    with _lock:
        _observers.append(observer)


def write_lines(lines: list[str], *, echo: bool = True) -> None:
    """Write lines other ranks sent (already protocol lines) to this process's stdout, the
    frequent kinds many to a line (:func:`~.protocol.relayed`).

    ``echo`` False: only observe them (their own rank wrote them to this log already).
    A batch of quiet lines only (other ranks' resource samples) is no activity.
    """
    global emitted, quiet_bytes
    signer = jobkey.signer()
    with _lock:
        kept = [line for line in lines if line]
        if not all(is_quiet(line.encode()) for line in kept):
            emitted += 1
        if echo:
            written = kept if signer is None else relayed(kept, signer)
            quiet_bytes += sum(len(line) + 1 for line in written if is_quiet(line.encode()))
            out = _out()
            out.write("".join(f"{line}\n" for line in written))
            out.flush()
        if not _observers:
            return
        for line in kept:
            seen = from_line(line, signer)
            if seen is not None:
                for observer in _observers:
                    observer(seen)


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


def _steps(value: Any) -> int:
    item = getattr(value, "item", None)
    if callable(item):  # a 0-d tensor or numpy scalar
        value = item()
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise TypeError(f"report(): total must be a positive whole number of steps, got {value!r}")
    return value


def progress(done: int, total: int) -> None:
    """Tell the notebook ``done`` of ``total`` steps are done (rank 0 only; others: no-op).

    Lines go out at most every :data:`PROGRESS_EVERY` seconds, and always when
    ``done`` reaches ``total``; one held back goes out when that time is up,
    whether or not another step came (a run that stops stepping, hung or
    waiting, shows its last step), or at :func:`flush_progress`.
    """
    global _progress_sent, _progress_pending
    if rank() != 0:
        return
    with _progress_lock:
        now = time.monotonic()
        if done < total and now - _progress_sent < PROGRESS_EVERY:
            _progress_pending = (done, total)
            _flush_later(PROGRESS_EVERY - (now - _progress_sent))
            return
        _progress_sent, _progress_pending = now, None
        emit("progress", step=done, total=total)


def flush_progress() -> None:
    """Send the ``progress`` line held back by the rate limit, if any."""
    global _progress_pending, _progress_sent
    with _progress_lock:
        pending, _progress_pending = _progress_pending, None
        if pending is not None:
            _progress_sent = time.monotonic()
            emit("progress", step=pending[0], total=pending[1])


def _flush_later(delay: float) -> None:
    """Send the held-back ``progress`` line in ``delay`` seconds (one timer at a time)."""
    global _progress_timer
    if _progress_timer is not None and _progress_timer.is_alive():
        return
    _progress_timer = threading.Timer(max(0.0, delay), flush_progress)
    _progress_timer.daemon = True
    _progress_timer.start()


def report(step: int | None = None, *, total: Any = None, **metrics: Any) -> None:
    """Report ``metrics`` (name -> number) at ``step`` from this rank.

    ``step`` defaults to one more than the previous call's. Values may be
    Python numbers, numpy scalars or one-element tensors. Each call emits one
    ``metric`` line of the line protocol.

    ``total`` (a reserved name, not a metric) is the number of steps of the
    run: steps count from 0 as in ``range(total)``, so ``step`` ``i`` means
    ``i + 1`` of ``total`` are done. Rank 0's calls drive the progress bar
    and ETA (``progress`` lines); ``report(step=i, total=n)`` alone is fine.
    """
    global _auto_step, explicit_total, own_metrics
    if not metrics and total is None:
        raise TypeError(
            "report() needs at least one metric or total=, e.g. report(step=i, loss=loss)"
        )
    steps = None if total is None else _steps(total)
    if step is None:
        step = _auto_step
    elif isinstance(step, bool) or not isinstance(step, int):
        item = getattr(step, "item", None)
        step = int(item() if callable(item) else step)
    _auto_step = step + 1
    if metrics:
        values = {str(k): _as_float(k, v) for k, v in metrics.items()}
        own_metrics = True
        emit("metric", step=step, values=values)
    if steps is not None:
        explicit_total = True
        progress(min(step + 1, steps), steps)


def auto_metrics(step: int, values: dict[str, Any]) -> None:
    """Metrics a library integration (autolog) read from the training loop, at ``step``.

    Numbers only (other values are skipped); nothing once the cell reports its
    own metrics with :func:`report` on this rank: the cell's values win, so no
    metric is reported twice.
    """
    if own_metrics:
        return
    kept: dict[str, float] = {}
    for name, value in values.items():
        try:
            kept[str(name)] = _as_float(name, value)
        except (TypeError, ValueError, RuntimeError):
            continue  # a string, a list, a tensor of many elements
    if kept:
        emit("metric", step=int(step), values=kept)


def auto_progress(done: int, total: int) -> None:
    """A library's own step count and total (autolog), unless ``report(total=...)`` gave one."""
    global library_total
    if explicit_total or total < 1:
        return
    library_total = True
    progress(min(max(0, int(done)), int(total)), int(total))
