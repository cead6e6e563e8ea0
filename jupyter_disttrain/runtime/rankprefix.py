"""Prefix every line a worker writes with its rank, for logs that several ranks share.

On Kubernetes the ranks of one pod share its log. With
``DISTRAIN_RANK_PREFIX=1`` the worker routes its fds 1 and 2 (Python and C
output alike, NCCL included) through a pipe, and a thread writes each line
to the original stdout as ``[rank R] line``. :func:`finish` flushes it.
"""

from __future__ import annotations

import os
import re
import sys
import threading

from .protocol import is_quiet

PREFIX_RE = re.compile(r"^\[rank (\d+)\] ")

_pump: threading.Thread | None = None
#: Chunks of output pumped so far (a rank's activity, read by the hang watch), but for
#: chunks of quiet protocol lines only (resource samples).
chunks = 0


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

    def pump() -> None:
        global chunks
        pending = b""
        with os.fdopen(read_fd, "rb", buffering=0) as src, os.fdopen(target, "wb", 0) as dst:
            while chunk := src.read(65536):
                pending += chunk
                *lines, pending = pending.split(b"\n")
                if not (all(map(is_quiet, lines)) and (not pending or is_quiet(pending))):
                    chunks += 1  # a chunk of resource samples only is no activity
                if lines:
                    dst.write(b"".join(tag + line + b"\n" for line in lines))
            if pending:
                dst.write(tag + pending + b"\n")

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
