"""Prefix every line a worker writes with its rank, for logs that several ranks share.

On Kubernetes the ranks of one pod share its log. With
``DISTRAIN_RANK_PREFIX=1`` the worker routes its fds 1 and 2 (Python and C
output alike, NCCL included) through a pipe, and a thread writes each line
to the original stdout as ``[rank R] line``. :func:`finish` flushes it.

The ranks of a pod write to one pipe, where only writes of up to 4 KiB are
atomic: a long line of one rank (a dataset row, a large result) could take
another rank's line into its middle and spoil both. Each batch of lines is
written whole under a lock the pod's ranks share (a file beside their
agent's, :func:`lock_path`).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import sys
import tempfile
import threading
from collections.abc import Iterator

from .protocol import is_quiet

PREFIX_RE = re.compile(r"^\[rank (\d+)\] ")

_pump: threading.Thread | None = None
#: Chunks of output pumped so far (a rank's activity, read by the hang watch), but for
#: chunks of quiet protocol lines only (resource samples).
chunks = 0


def lock_path() -> str:
    """The lock file the ranks started by one agent (this process's parent) share."""
    return os.path.join(tempfile.gettempdir(), f"distrain-output-{os.getuid()}-{os.getppid()}.lock")


@contextlib.contextmanager
def _locked(path: str) -> Iterator[None]:
    """Hold ``path``'s exclusive lock (no lock when the file cannot be made: write anyway)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    except OSError:
        yield
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def start(rank: int) -> None:
    """Prefix this process's output from now on (idempotent)."""
    global _pump
    if _pump is not None:
        return
    sys.stdout.flush()
    sys.stderr.flush()
    read_fd, write_fd = os.pipe()
    target = os.dup(1)
    os.dup2(write_fd, 1)
    os.dup2(write_fd, 2)
    os.close(write_fd)
    tag = f"[rank {rank}] ".encode()
    lock = lock_path()

    def write(data: bytes) -> None:
        with _locked(lock):
            _write_all(target, data)

    def pump() -> None:
        global chunks
        pending = b""
        with os.fdopen(read_fd, "rb", buffering=0) as src:
            while chunk := src.read(65536):
                pending += chunk
                *lines, pending = pending.split(b"\n")
                if not (all(map(is_quiet, lines)) and (not pending or is_quiet(pending))):
                    chunks += 1  # a chunk of resource samples only is no activity
                if lines:
                    write(b"".join(tag + line + b"\n" for line in lines))
            if pending:
                write(tag + pending + b"\n")
        os.close(target)

    _pump = threading.Thread(target=pump, name="distrain-rank-prefix", daemon=True)
    _pump.start()


def finish(timeout: float = 5.0) -> None:
    """Write out everything still in the pipe (call before the process exits)."""
    global _pump
    if _pump is None:
        return
    sys.stdout.flush()
    sys.stderr.flush()
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    os.close(devnull)
    _pump.join(timeout)
    _pump = None


def split(line: str) -> tuple[int | None, str]:
    """``"[rank 3] text"`` -> ``(3, "text")``; other lines -> ``(None, line)``."""
    match = PREFIX_RE.match(line)
    if match is None:
        return None, line
    return int(match.group(1)), line[match.end() :]
