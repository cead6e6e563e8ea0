"""Finding and killing every process of a container, however it was started.

Each container process is started in a new session (its own process group)
with ``MARKER=<emulator id>/<pod uid>/<container>/<run>`` in its environment. Processes that leave the
group (a child calling ``setsid``, as torchrun's workers do) or lose their
parent keep the marker, so :func:`members` finds them by scanning the process
table: the emulator's stand-in for a container's cgroup.
"""

from __future__ import annotations

import os
import signal
import time

import psutil

MARKER = "K8S_EMULATOR_CONTAINER_ID"


def members(prefix: str, pgid: int | None = None) -> list[psutil.Process]:
    """Live processes in process group ``pgid`` or whose marker starts with ``prefix``."""
    found: dict[int, psutil.Process] = {}
    me = os.getpid()
    for proc in psutil.process_iter():
        if proc.pid == me:
            continue
        try:
            if proc.status() == psutil.STATUS_ZOMBIE:
                continue
            if pgid is not None and os.getpgid(proc.pid) == pgid:
                found[proc.pid] = proc
            elif proc.environ().get(MARKER, "").startswith(prefix):
                found[proc.pid] = proc
        except (psutil.Error, OSError):
            continue
    return list(found.values())


def signal_all(prefix: str, pgid: int | None, sig: int) -> int:
    """Send ``sig`` to every process :func:`members` finds; return how many were signalled."""
    procs = members(prefix, pgid)
    for proc in procs:
        try:
            proc.send_signal(sig)
        except psutil.Error:
            pass
    return len(procs)


def kill_all(prefix: str, pgid: int | None = None, timeout: float = 10.0) -> None:
    """SIGKILL every process :func:`members` finds until none is left (or ``timeout`` passes)."""
    deadline = time.monotonic() + timeout
    while signal_all(prefix, pgid, signal.SIGKILL) and time.monotonic() < deadline:
        time.sleep(0.02)
