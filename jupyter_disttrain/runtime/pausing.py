"""Pausing a running rank on the notebook's request: it stops at the next line of its cell.

Standard library only. The request reaches the rank's watch thread
(:mod:`.hangwatch`, the same control that asks for stacks), signed with
the job key (a request without the key is ignored); the watch
thread cannot stop another thread, so it sends :data:`PAUSE_SIGNAL` to this
process's main thread with ``pthread_kill``. The handler (installed by
:func:`install` from the main thread, only where nothing else handles that
signal) makes the rank's debugger stop at the next line the innermost frame
of the user's code (the cell, or the running script) runs: the rank then
reads as paused, with ``reason`` ``pause``, exactly as at a breakpoint.

A main thread inside a long C call (a collective waiting for a peer, a
``sleep``) takes the signal when the call returns. A rank not running the
user's code (starting, ending) ignores the request.
"""

from __future__ import annotations

import hmac
import signal
import threading
from collections.abc import Iterable
from types import FrameType
from typing import Final

from . import debugger, jobkey
from .cell import code_filename

#: The signal that carries a pause from the watch thread to the main thread (a real-time
#: signal: nothing in the runtime, torch or torchrun uses it).
PAUSE_SIGNAL: Final = signal.SIGRTMIN + 4
#: A request's ranks: every rank.
ALL: Final = "all"

_installed = False


def parse_request(value: str, key: bytes) -> tuple[int, frozenset[int] | None] | None:
    """``"N:all:TAG"`` or ``"N:1,5:TAG"`` (request number, ranks) from a control file or
    annotation, TAG its HMAC under job key ``key`` (``control`` subkey); None for anything
    else, a wrong tag included (the rank ignores it)."""
    body, sep, tag = value.strip().rpartition(":")
    if not sep or not hmac.compare_digest(tag.encode("ascii", "replace"), signature(key, body)):
        return None
    number, sep, ranks = body.partition(":")
    if not sep or not number.isdigit() or int(number) <= 0:
        return None
    if ranks == ALL:
        return int(number), None
    parts = ranks.split(",")
    if not ranks or not all(p.isdigit() for p in parts) or len(parts) > 65536:
        return None
    return int(number), frozenset(int(p) for p in parts)


def render_request(number: int, ranks: Iterable[int] | None, key: bytes) -> str:
    """The control value :func:`parse_request` reads, signed with job key ``key``."""
    listed = ALL if ranks is None else ",".join(str(r) for r in sorted(set(ranks)))
    body = f"{number}:{listed}"
    return f"{body}:{signature(key, body).decode('ascii')}"


def signature(key: bytes, body: str) -> bytes:
    """The hex HMAC-SHA256 of request ``body`` under job key ``key``'s ``control`` subkey."""
    mac = hmac.new(jobkey.subkey(key, "control"), body.encode("utf-8", "replace"), "sha256")
    return mac.hexdigest().encode("ascii")


def install() -> bool:
    """Handle :data:`PAUSE_SIGNAL` in this process (call from the main thread); False when
    something else handles it already (then a pause request is ignored)."""
    global _installed
    if threading.current_thread() is not threading.main_thread():
        return False
    if signal.getsignal(PAUSE_SIGNAL) not in (signal.SIG_DFL, None, _on_signal):
        return False
    signal.signal(PAUSE_SIGNAL, _on_signal)
    _installed = True
    return True


def request() -> bool:
    """Ask the main thread to pause at its next user line (from any thread); False when
    this process cannot (no handler, or the rank is paused already)."""
    if not _installed or debugger.paused():
        return False
    ident = threading.main_thread().ident
    if ident is None:
        return False
    signal.pthread_kill(ident, PAUSE_SIGNAL)
    return True


def user_frame(frame: FrameType | None, filename: str) -> FrameType | None:
    """The innermost frame of ``frame``'s stack running ``filename`` (None: not there)."""
    while frame is not None:
        if frame.f_code.co_filename == filename:
            return frame
        frame = frame.f_back
    return None


def _on_signal(_signum: int, frame: FrameType | None) -> None:
    target = user_frame(frame, code_filename())
    if target is None or frame is None or debugger.paused():
        return
    debugger.pause_at(frame, target)
