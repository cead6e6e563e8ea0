"""A worker's standard streams that know where their line stands, and a protocol writer
that always starts a line of its own.

A cell may flush part of a line (``print(..., end="", flush=True)``, a tqdm bar
redrawn after ``\\r``). A protocol line written then would continue it, and the
reader, who keeps the signed control line, would drop the fragment before it.
:func:`tracked_stream` wraps fd 1 or 2 so that each write records whether it
left the file mid-line (a :class:`LineEnd` the streams of one file share);
:class:`ProtocolWriter` then ends the fragment's line before its own. What
is written to the fds below Python (C code) is not seen here.
"""

from __future__ import annotations

import io
import os
import threading
from typing import Any

_NEWLINE = ord("\n")


class LineEnd:
    """Whether the last bytes written to one file left it mid-line."""

    def __init__(self) -> None:
        self.open = False
        # reentrant: a signal handler that reports (SIGTERM's) may run inside a write
        self.lock = threading.RLock()

    def wrote(self, data: bytes | bytearray | memoryview) -> None:
        """Record the last bytes written (empty: nothing changes)."""
        if len(data):
            self.open = data[-1] != _NEWLINE


class _OnFd:
    """A writer on ``fd`` (left open) whose writes go under ``end``'s lock."""

    def __init__(self, fd: int, end: LineEnd) -> None:
        super().__init__()
        self._fd = fd
        self._end = end

    def writable(self) -> bool:
        return True

    def fileno(self) -> int:
        return self._fd


class _TrackingWriter(_OnFd, io.RawIOBase):
    """fd ``fd`` as a raw stream whose writes are recorded in ``end``."""

    def write(self, data: Any) -> int:
        view = memoryview(data).cast("B")
        with self._end.lock:
            written = os.write(self._fd, view)
            self._end.wrote(view[:written])
        return written


def tracked_stream(fd: int, end: LineEnd, like: Any) -> io.TextIOWrapper:
    """A text stream on ``fd`` that records where its line stands in ``end``: encoding and
    errors as ``like`` (the stream it replaces) has them; line-buffered, not written
    through (a partial line stays in Python until its newline or an explicit flush)."""
    return io.TextIOWrapper(
        io.BufferedWriter(_TrackingWriter(fd, end)),
        encoding=getattr(like, "encoding", None) or "utf-8",
        errors=getattr(like, "errors", None) or "backslashreplace",
        line_buffering=True,
        write_through=False,
    )


def same_file(fd: int, other: int) -> bool:
    """Whether two fds write to one file or pipe (a log both are redirected to)."""
    try:
        mine, theirs = os.fstat(fd), os.fstat(other)
    except OSError:
        return False
    return (mine.st_dev, mine.st_ino) == (theirs.st_dev, theirs.st_ino)


class ProtocolWriter(_OnFd, io.TextIOBase):
    """Whole protocol lines on ``fd``, each on a line of its own: when the streams sharing
    ``end`` left the file mid-line, a newline ends that line first (its text stays)."""

    def write(self, text: str) -> int:
        data = text.encode("utf-8", "backslashreplace")
        with self._end.lock:
            if self._end.open:
                data = b"\n" + data
            view = memoryview(data)
            while view:  # a pipe may take part of it
                view = view[os.write(self._fd, view) :]
            self._end.wrote(data)
        return len(text)
