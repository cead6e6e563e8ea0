"""Sessions in a real Jupyter kernel: a failing cell, Ctrl-C of a stuck cell, and kernel exit
leaves no process."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from jupyter_disttrain.backends.local import jobdir
from tests.conftest import assert_no_processes
from tests.kernel_harness import Kernel
from tests.kernel_harness import kernel as start_kernel
from tests.test_kernel import wait_for_hello
from tests.waiting import wait_for

pytestmark = pytest.mark.slow

# Rank 1 loops (Ctrl-C reaches it); rank 0 waits in a barrier's C call (it does not). Rank 0
# reports only once its main thread is inside ``barrier``: reported before, a loaded machine
# could still have it in Python when the interrupt came, and it came back too.
STUCK = """%%distrain --session {name}
import sys, threading, time, torch.distributed as dist
main = threading.get_ident()
def report_inside(name):
    while sys._current_frames()[main].f_code.co_name != name:
        time.sleep(0.01)
    report(step=0, up=1.0)
if dist.get_rank() == 1:
    report(step=0, up=1.0)
    while True:
        time.sleep(0.1)
threading.Thread(target=report_inside, args=("barrier",), daemon=True).start()
dist.barrier()
"""


@pytest.fixture
def kernel(home: Path) -> Iterator[Kernel]:
    with start_kernel(str(home)) as k:
        k.execute(f"import os; os.environ['DISTRAIN_HOME'] = {str(home)!r}")
        k.execute("%load_ext jupyter_disttrain")
        k.execute("%distrain_config live=none")
        yield k


def assert_gone(pids: list[int], wait: float = 10.0) -> None:
    """Fail unless every process in ``pids`` ended within ``wait`` seconds."""
    deadline = time.monotonic() + wait
    left = [p for p in pids if psutil.pid_exists(p)]
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = [p for p in left if _running(p)]
    assert not left, f"processes left behind: {left}"


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def wait_for_cell(name: str, ranks: int, cell: int, timeout: float = 60) -> None:
    """Until every rank of session ``name`` started cell number ``cell`` (its ``cell`` line)."""
    directory = jobdir.job_dir(name)

    def started() -> bool:
        return ranks <= sum(
            '"kind":"cell"' in line and f'"id":{cell},"phase":"start"' in line
            for path in jobdir.rank_logs(directory).values()
            for line in path.read_text().splitlines()
        )

    wait_for(started, timeout, f"{name}: the cell did not start on every rank")


def test_a_failing_cell_then_ctrl_c_of_a_stuck_cell_then_the_kernels_shutdown(
    kernel: Kernel,
) -> None:
    """Three checks in turn, in one kernel. A failing cell shows its rank's traceback from
    the cell, and the group lives on. Ctrl-C of a stuck cell restarts the group and says
    so. The kernel's shutdown leaves no session process."""
    kernel.execute("%distrain_session start ks-fail --nodes 2 --nproc 1")
    wait_for_hello("ks-fail", 2)
    cell = (
        "%%distrain --session ks-fail\nimport torch.distributed as dist\n"
        "def check(rank):\n    if rank == 1:\n        raise ValueError('bad input')\n"
        "check(dist.get_rank())"
    )
    kernel.start(cell)
    reply = kernel.kc.get_shell_msg(timeout=90)
    assert reply["content"]["ename"] == "ValueError", reply["content"]
    shown = "\n".join(reply["content"]["traceback"])
    lines = shown.splitlines()
    assert lines[:2] == ["rank 1 raised ValueError:", "Traceback (most recent call last):"], shown
    assert lines[2].startswith('  File "<distrain-cell') and lines[-1] == "ValueError: bad input"
    assert "in check" in shown
    assert "jupyter_disttrain" not in shown and "interactiveshell" not in shown, shown
    # between cells the group runs on: rank 1 reads Raised (its cell raised), rank 0 Ready
    states = kernel.run(
        "from jupyter_disttrain.service import default_service\n"
        "group = default_service().sessions.get('ks-fail').job\n"
        "print(group.monitor.display_state, [r.state for r in group.monitor.ranks()])"
    )
    assert states.strip() == "Running ['Ready', 'Raised']", states
    kernel.execute("%%distrain --session ks-fail\nimport torch.distributed as dist\ndist.barrier()")
    kernel.run("%distrain_session stop ks-fail")
    # Ctrl-C of a stuck cell
    kernel.execute("%distrain_session start ks-int --nodes 2 --nproc 1")
    old = wait_for_hello("ks-int", 2)
    kernel.execute("%%distrain --session ks-int\nkept = 5")
    start = len(kernel.iopub)
    msg_id = kernel.start(STUCK.format(name="ks-int"))
    wait_for_cell("ks-int", 2, cell=2)
    kernel.km.interrupt_kernel()
    reply = kernel.kc.get_shell_msg(timeout=90)
    assert reply["parent_header"]["msg_id"] == msg_id
    assert reply["content"]["status"] == "error"
    assert reply["content"]["ename"] == "SessionLost", reply["content"]
    kernel.drain(0.5)
    text = (
        "".join(
            m["content"].get("text", "") for m in kernel.iopub[start:] if m["msg_type"] == "stream"
        )
        + reply["content"]["evalue"]
    )
    assert "rank(s) 0 did not come back" in text and "state was lost" in text, text
    assert_gone(old)  # the old group's ranks
    out = kernel.run("%%distrain --session ks-int\n'kept' in globals()")
    assert kernel.run("print(_)").strip() == "False", out
    kernel.run("%distrain_session stop ks-int")
    # the kernel's shutdown
    exit_session(kernel, False)


def exit_session(kernel: Kernel, now: bool) -> None:
    """Start a 2x2 session, run a cell, end the kernel (``now``: killed): no process left."""
    name = f"ks-exit-{int(now)}"
    kernel.execute(f"%distrain_session start {name} --nodes 2 --nproc 2")
    pids = wait_for_hello(name, 4)
    kernel.execute(f"%%distrain --session {name}\nimport torch.distributed as dist\ndist.barrier()")
    kernel.kc.stop_channels()
    kernel.km.shutdown_kernel(now=now)
    assert_no_processes(jobdir.job_dir(name), pids, wait=15)


def test_a_killed_kernel_leaves_no_session_process(kernel: Kernel) -> None:
    exit_session(kernel, True)
