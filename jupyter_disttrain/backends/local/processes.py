"""Process-tree control: every process of a job, and ending them all."""

from __future__ import annotations

import os
import signal

import psutil

from .plan import (
    KILL_GRACE_SECONDS,
)


def job_processes(pgid: int | None, roots: list[int]) -> list[psutil.Process]:
    """Members of process group ``pgid``, the ``roots``, and all their descendants."""
    found: dict[int, psutil.Process] = {}
    if pgid:
        for proc in psutil.process_iter():
            try:
                if os.getpgid(proc.pid) == pgid:
                    found[proc.pid] = proc
            except (OSError, psutil.Error):
                continue
    for pid in roots:
        try:
            found.setdefault(pid, psutil.Process(pid))
        except psutil.Error:
            continue
    for proc in list(found.values()):
        try:
            for child in proc.children(recursive=True):
                found.setdefault(child.pid, child)
        except psutil.Error:
            continue
    found.pop(os.getpid(), None)
    return list(found.values())


def terminate(pgid: int | None, roots: list[int], grace: float = KILL_GRACE_SECONDS) -> int:
    """SIGTERM every process of a job, SIGKILL what is left after ``grace``; count them."""
    procs = job_processes(pgid, roots)
    for proc in procs:
        try:
            proc.send_signal(signal.SIGTERM)
        except psutil.Error:
            pass
    _, alive = psutil.wait_procs(procs, timeout=grace)
    # Late children (a worker forked while we were signalling) are caught here.
    alive = list({p.pid: p for p in alive + job_processes(pgid, [])}.values())
    for proc in alive:
        try:
            proc.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(alive, timeout=grace)
    return len(procs)
