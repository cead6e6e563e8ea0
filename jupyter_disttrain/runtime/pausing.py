"""Acting on the notebook's requests in a running rank: pause at the next cell line, or take
new breakpoints in the cell that runs.

Standard library only. A request (:mod:`.control`) reaches the rank's
watch thread (:mod:`.hangwatch`); the watch thread cannot trace or stop
another thread, so it leaves the request here and sends
:data:`PAUSE_SIGNAL` to this process's main thread with ``pthread_kill``.
The handler (installed by :func:`install` from the main thread, only where
nothing else handles that signal) only arms the rank's debugger: new
breakpoints replace the running cell's, and a pause makes it stop at the
next line the innermost frame of the user's code (the cell, or the running
script) runs. The stop itself happens at that line, outside any lock the
runtime may hold where the signal came. The rank then reads as paused
(``reason`` ``pause``), exactly as at a breakpoint.

A main thread inside a long C call (a collective waiting for a peer, a
``sleep``) takes the signal when the call returns. A rank not running the
user's code (starting, ending) ignores the request.
"""

from __future__ import annotations

import signal
import sys
import threading
from types import FrameType
from typing import Any, Final

from . import debugger
from .cell import CELL_FILENAME, code_filename

#: The signal that carries a request from the watch thread to the main thread (a real-time
#: signal: nothing in the runtime, torch or torchrun uses it).
PAUSE_SIGNAL: Final = signal.SIGRTMIN + 4

_installed = False
_lock = threading.Lock()
_pending: dict[str, Any] = {}  # "pause": True, "breaks": the newest breakpoints


def install() -> bool:
    """Handle :data:`PAUSE_SIGNAL` in this process (call from the main thread); False when
    something else handles it already (then requests are ignored)."""
    global _installed
    if threading.current_thread() is not threading.main_thread():
        return False
    if signal.getsignal(PAUSE_SIGNAL) not in (signal.SIG_DFL, None, _on_signal):
        return False
    signal.signal(PAUSE_SIGNAL, _on_signal)
    _installed = True
    return True


def request_pause() -> bool:
    """Ask the main thread to pause at its next user line (from any thread); False when
    this process cannot (no handler, or the rank is paused already)."""
    if debugger.paused():
        return False
    return _ask("pause", True)


def request_breaks(spots: list[dict[str, Any]]) -> bool:
    """Ask the main thread to take breakpoints ``spots`` (``line``, ``condition``) in the
    running cell, replacing its own (from any thread); False without a handler."""
    return _ask("breaks", spots)


def _ask(what: str, value: Any) -> bool:
    ident = threading.main_thread().ident
    if not _installed or ident is None:
        return False
    with _lock:
        _pending[what] = value
    signal.pthread_kill(ident, PAUSE_SIGNAL)
    return True


def user_frame(frame: FrameType | None, filename: str) -> FrameType | None:
    """The innermost frame of ``frame``'s stack running ``filename`` (None: not there)."""
    while frame is not None:
        if frame.f_code.co_filename == filename:
            return frame
        frame = frame.f_back
    return None


def outermost_frame(frame: FrameType, filename: str) -> FrameType:
    """The outermost frame running ``filename`` of ``frame``'s stack (``frame`` runs it)."""
    found = frame
    while frame.f_back is not None:
        frame = frame.f_back
        if frame.f_code.co_filename == filename:
            found = frame
    return found


def _on_signal(_signum: int, frame: FrameType | None) -> None:
    with _lock:
        asked = dict(_pending)
        _pending.clear()
    if frame is None:
        return
    spots = asked.get("breaks")
    running = code_filename()
    cell = user_frame(frame, running) if running.startswith(CELL_FILENAME[:-1]) else None
    if spots is not None and cell is not None:
        rearm(frame, cell, spots)
    target = user_frame(frame, code_filename())
    if asked.get("pause") and target is not None and not debugger.paused():
        pause_at(frame, target)


def _trace_stack(frame: FrameType, tracer: Any, stop: FrameType | None) -> FrameType:
    """Give every frame from ``frame`` up to ``stop`` (all when None) ``tracer``; the last."""
    last = frame
    walk: FrameType | None = frame
    while walk is not None and walk is not stop:
        walk.f_trace = tracer
        last = walk
        walk = walk.f_back
    return last


def rearm(frame: FrameType, cell: FrameType, spots: list[dict[str, Any]]) -> None:
    """(On the thread running ``frame``, in the cell frame ``cell``) breakpoints ``spots`` of
    the cell from now on: the armed debugger's replaced, or a new one armed as at the cell's
    start (:func:`.debugger.arm`), disarmed when the cell returns."""
    current = debugger.armed()
    if current is None and not spots:
        return
    file = cell.f_code.co_filename
    if debugger.paused():  # stopped in a debugger now: the breakpoints only (no retrace)
        if current is not None:
            debugger.set_breaks(current, file, spots)
        return
    if current is None:
        current = debugger.arm_below(outermost_frame(cell, file).f_back, file, spots)
        if current is None:
            return
    else:
        debugger.set_breaks(current, file, spots)
    _trace_stack(frame, current.trace_dispatch, current.botframe)
    sys.settrace(current.trace_dispatch)


def pause_at(frame: FrameType, target: FrameType) -> None:
    """(On the thread running ``frame``) stop at the next line ``target`` (a frame of
    ``frame``'s stack) runs: with the cell's armed debugger (its breakpoints kept), else a
    new one. Nothing without a job key."""
    current = debugger.armed()
    if current is not None:
        _trace_stack(frame, current.trace_dispatch, current.botframe)
    else:
        current = debugger.new_debugger()
        if current is None:
            return
        current.botframe = _trace_stack(frame, current.trace_dispatch, None)
    current.asked = True
    current._set_stopinfo(target, None)
    sys.settrace(current.trace_dispatch)
