"""A real Jupyter kernel: interrupting a --wait cell and shutting the kernel down end jobs."""

from __future__ import annotations

import queue
import re
from pathlib import Path

import pytest

from jupyter_disttrain.backends.local import jobdir
from tests.conftest import assert_no_processes
from tests.kernel_harness import kernel as start_kernel
from tests.waiting import wait_for

pytestmark = pytest.mark.slow

SLEEPER = "import time\nreport(step=0, up=1.0)\ntime.sleep(300)"


def wait_for_hello(name: str, ranks: int, timeout: float = 60) -> list[int]:
    """The pids of job ``name``'s ``ranks`` ranks, once each has said hello."""
    directory = jobdir.job_dir(name)

    def pids() -> list[int] | None:
        found = [
            int(line.split('"pid":')[1].split(",")[0])
            for path in jobdir.rank_logs(directory).values()
            for line in path.read_text().splitlines()
            if '"kind":"hello"' in line
        ]
        return found if len(found) == ranks else None

    found = wait_for(pids, timeout, f"{name}: ranks did not start")
    assert found is not None
    return found


def test_a_notebooks_kernel_names_its_jobs_an_interrupt_and_a_shutdown_end_them(
    home: Path,
) -> None:
    """One kernel, started as Jupyter starts a notebook's (JPY_SESSION_NAME set, ipykernel's
    ``__session__``), three checks in turn: a cell job is named after its notebook and cell;
    interrupting a --wait cell stops its job (every rank ends, the cell raises
    KeyboardInterrupt); shutting the kernel down ends a background job."""
    notebook = str(home / "work" / "Quick Start.ipynb")
    with start_kernel(str(home), env={"JPY_SESSION_NAME": notebook}) as kernel:
        kernel.execute("%load_ext jupyter_disttrain")
        assert kernel.run("print(__session__)").strip() == notebook
        kernel.run("x = 1")
        _, reply = kernel.execute("%%distrain --nodes 1 --nproc 1 --wait\n6 * 7")
        cell = reply["content"]["execution_count"]  # the In[N] the notebook shows
        kernel.drain(0.5)
        printed = "".join(
            m["content"]["text"]
            for m in kernel.iopub
            if m["msg_type"] == "stream"
            and m["parent_header"].get("msg_id") == reply["parent_header"]["msg_id"]
        )
        found = re.search(rf"^(quick-start-c{cell}-[0-9a-f]{{4}}): ", printed, re.M)
        assert found, printed
        assert jobdir.read_state(jobdir.job_dir(found[1]))["state"] == "Succeeded"  # type: ignore[index]
        # an interrupt stops a waiting job
        kernel.start(f"%%distrain --nodes 2 --nproc 1 --wait --name kr-int\n{SLEEPER}")
        pids = wait_for_hello("kr-int", 2)
        kernel.km.interrupt_kernel()
        try:  # the stop ends every rank first: on a loaded machine that has taken over 60 s
            reply = kernel.kc.get_shell_msg(timeout=180)
        except queue.Empty:
            directory = jobdir.job_dir("kr-int")
            logs = {
                p.name: p.read_text()[-2000:] for p in sorted((directory / "logs").glob("*.log"))
            }
            raise AssertionError(
                f"no reply 180 s after the interrupt: {jobdir.read_state(directory)}\n{logs}"
            ) from None
        assert reply["content"]["status"] == "error"
        assert reply["content"]["ename"] == "KeyboardInterrupt"
        assert_no_processes(jobdir.job_dir("kr-int"), pids, wait=10)
        assert jobdir.read_state(jobdir.job_dir("kr-int"))["state"] == "Stopped"  # type: ignore[index]
        # the kernel's shutdown ends a background job
        kernel.execute(
            f"%%distrain --nodes 2 --nproc 2 --name kr-bg\n{SLEEPER}"
        )  # raises unless ok
        pids = wait_for_hello("kr-bg", 4)
        kernel.kc.stop_channels()
        kernel.km.shutdown_kernel(now=False)
        assert_no_processes(jobdir.job_dir("kr-bg"), pids, wait=15)
