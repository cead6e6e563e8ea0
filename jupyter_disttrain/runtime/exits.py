"""What a rank's ``SystemExit`` says: an argument parser's error, not its exit status.

``argparse`` prints its usage and ``prog: error: ...`` to stderr, then raises
``SystemExit(2)``: the error line names the job's failure far better than ``2``,
and the parser's own frames are nothing the user wrote. Standard library only.
"""

from __future__ import annotations

import os
from types import TracebackType

__all__ = ["parser_error", "without_parser_frames"]


def _is_parser_exit(tb: TracebackType) -> bool:
    code = tb.tb_frame.f_code
    return code.co_name in ("exit", "error") and os.path.basename(code.co_filename) == "argparse.py"


def parser_error(exc: BaseException) -> str | None:
    """``prog: error: the following arguments are required: x`` when ``exc`` is the
    ``SystemExit`` an ``argparse`` parser raised on bad arguments; None otherwise."""
    if not isinstance(exc, SystemExit) or exc.code in (None, 0):
        return None
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    if tb is None or not _is_parser_exit(tb):
        return None
    message = tb.tb_frame.f_locals.get("message")
    return message.strip() if isinstance(message, str) and message.strip() else None


def without_parser_frames(tb: TracebackType | None) -> TracebackType | None:
    """``tb`` up to the user's frame that called the parser (argparse's own frames cut).

    Tracebacks are linked lists from the outermost frame: the frames from the
    first ``argparse`` one on are dropped by rebuilding the user's part.
    """
    frames: list[TracebackType] = []
    while tb is not None and os.path.basename(tb.tb_frame.f_code.co_filename) != "argparse.py":
        frames.append(tb)
        tb = tb.tb_next
    if tb is None:  # no parser frame: unchanged
        return frames[0] if frames else None
    out: TracebackType | None = None
    for frame in reversed(frames):
        out = TracebackType(out, frame.tb_frame, frame.tb_lasti, frame.tb_lineno)
    return out
