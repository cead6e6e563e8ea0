"""Finding and killing every process of a container, however it was started.

Each container process is started in a new session (its own process group)
with ``MARKER=<emulator id>/<pod uid>/<container>/<run>/`` in its environment.
Processes that leave the group (a child calling ``setsid``, as torchrun's
workers do) or lose their parent keep the marker, so :func:`members` finds
them by scanning the process table: the emulator's stand-in for a
container's cgroup.

:class:`Reaper` covers the case where the emulator's own process dies without
stopping it (SIGKILL, a test runner's timeout): a small watchdog process that
kills every marked process once the emulator's process is gone.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

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


class Reaper:
    """A watchdog process: when this process ends, however it ends, it kills the
    processes whose marker starts with ``prefix``, deletes the network namespaces named
    ``netns...`` (when given) and removes ``root``.

    It waits for the end of a pipe only this process writes to; :meth:`stop`
    closes the pipe for a clean shutdown (the watchdog then finds nothing left).
    """

    def __init__(self, prefix: str, root: Path | None, netns: str = "") -> None:
        read, self._write = os.pipe()
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-c", _WATCHDOG, __file__, prefix, str(root or ""), netns],
                stdin=read,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,  # a Ctrl-C to the test runner must not reach it
            )
        finally:
            os.close(read)

    def stop(self) -> None:
        os.close(self._write)
        self._proc.wait(timeout=30)


def _watch(prefix: str, root: str, netns: str) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    sys.stdin.buffer.read()  # returns when the emulator's process closes the pipe or dies
    kill_all(prefix)
    if netns and os.path.isdir("/run/netns"):
        for name in sorted(os.listdir("/run/netns")):
            if name.startswith(netns):
                subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=30)
    if root:
        shutil.rmtree(root, ignore_errors=True)


# This file loaded on its own (its directory holds modules named like standard ones).
_WATCHDOG = """
import importlib.util, sys
spec = importlib.util.spec_from_file_location("k8s_emulator_procs", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
module._watch(sys.argv[2], sys.argv[3], sys.argv[4])
"""
