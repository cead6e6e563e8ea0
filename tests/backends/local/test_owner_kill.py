"""A kernel killed with SIGKILL leaves no process of its local jobs, in either launch mode."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

import psutil
import pytest

from jupyter_disttrain.backends.local import jobdir
from tests.kernel_harness import Kernel
from tests.test_kernel import wait_for_hello
from tests.test_sessions_kernel import kernel  # noqa: F401 (the fixture: a kernel with the extension)

pytestmark = pytest.mark.slow

SLEEPER = "import time\nreport(step=0, up=1.0)\ntime.sleep(300)"


def job_tree(directory: Path) -> dict[int, str]:
    """Every process of a running local job: its group, its agents and their descendants."""
    state = jobdir.read_state(directory) or {}
    pgid = state.get("pgid")
    procs: dict[int, psutil.Process] = {}
    for proc in psutil.process_iter():
        with contextlib.suppress(OSError, psutil.Error):
            if pgid and os.getpgid(proc.pid) == pgid:
                procs[proc.pid] = proc
    for pid in state.get("agents", []):
        with contextlib.suppress(psutil.Error):
            procs.setdefault(pid, psutil.Process(pid))
    for proc in list(procs.values()):
        with contextlib.suppress(psutil.Error):
            procs.update((c.pid, c) for c in proc.children(recursive=True))
    out = {}
    for pid, proc in procs.items():
        with contextlib.suppress(psutil.Error):
            if proc.status() != psutil.STATUS_ZOMBIE:
                out[pid] = " ".join(proc.cmdline())[:100]
    return out


def running(pids: dict[int, str]) -> dict[int, str]:
    """Those of ``pids`` still running (the same process: pid and command line)."""
    left = {}
    for pid, command in pids.items():
        with contextlib.suppress(psutil.Error):
            proc = psutil.Process(pid)
            if proc.status() != psutil.STATUS_ZOMBIE and " ".join(proc.cmdline())[:100] == command:
                left[pid] = command
    return left


@pytest.mark.parametrize("mode", ["exec", "fork"])
def test_sigkill_of_the_kernel_leaves_no_job_process(kernel: Kernel, mode: str) -> None:  # noqa: F811
    name = f"kill-owner-{mode}"
    kernel.execute(f"%distrain_config launch_mode={mode}")
    kernel.execute(f"%%distrain --nodes 2 --nproc 2 --name {name}\n{SLEEPER}")
    ranks = wait_for_hello(name, 4)
    directory = jobdir.job_dir(name)
    assert (jobdir.read_state(directory) or {}).get("mode") == mode
    tree = job_tree(directory)
    assert set(ranks) <= set(tree), (ranks, tree)
    assert len(tree) >= 6, tree  # two agents and four workers at least
    assert kernel.km.provisioner is not None
    pid = kernel.km.provisioner.pid
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    left = running(tree)
    while left and time.monotonic() < deadline:
        time.sleep(0.2)
        left = running(tree)
    assert not left, f"{len(left)} of {len(tree)} processes still run 10 s after: {left}"
