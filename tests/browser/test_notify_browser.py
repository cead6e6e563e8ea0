"""Job ends as JupyterLab notifications, in a real browser (JupyterLab on 127.0.0.1, Chromium).

With the jobs sidebar closed, a notebook runs a short local job: a success
notification shows with "Open notebook" and "Show logs", and "Show logs"
opens the job's logs. A second job, whose rank 1 raises, shows an error
notification with the reason, which stays until used; its "Open notebook"
brings the notebook back to the front. Each end is announced once. A job that
hangs shows a "hung" warning and is stopped from the jobs panel; the same
``--name`` run again says nothing of the old run's stop.
Screenshots land in ``test-output/notify/``.
"""

from __future__ import annotations

import pytest

from .conftest import REPO, Lab
from .harness import run_harness, write_notebook

OUTPUT = REPO / "test-output" / "notify"

CELLS = [
    "%load_ext jupyter_disttrain\n%distrain_config live=none",
    """%%distrain --nodes 1 --nproc 2 --name notify-ok
import time

for step in range(20):
    report(step=step, loss=1.0 / (step + 1))
    time.sleep(0.05)""",
    """%%distrain --nodes 1 --nproc 2 --name notify-fail
import torch.distributed as dist

if dist.get_rank() == 1:
    raise ValueError("bad batch on purpose")
dist.barrier()  # rank 0 waits for rank 1: always stopped as a consequence""",
    """%%distrain --nodes 1 --nproc 2 --name notify-hang --hang-after 2
import time
import torch
import torch.distributed as dist

for step in range(400):
    dist.all_reduce(torch.ones(4))  # rank 0 waits here for rank 1, asleep
    report(step=step, total=400, loss=1.0 / (step + 1))
    if dist.get_rank() == 1 and step == 3:
        time.sleep(3600)
    time.sleep(0.05)""",
    """%%distrain --nodes 1 --nproc 2 --name notify-hang
import time

for step in range(150):  # still running when its detail is read, on a loaded machine too
    report(step=step, total=150, loss=1.0 / (step + 1))
    time.sleep(0.1)""",
]


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_job_end_notifications(lab: Lab) -> None:
    notebook = write_notebook(lab.root, "notify.ipynb", CELLS)
    result = run_harness("notify.mjs", lab, notebook, OUTPUT)

    assert not result["sidebarVisible"]
    ok = result["ok"]
    assert ok["text"].startswith("Training job notify-ok succeeded after "), ok
    assert ok["text"].endswith(", step 19"), ok
    assert ok["buttons"] == ["Open notebook", "Show logs"], ok
    assert result["afterShowLogs"] == "Logs: notify-ok"

    failed = result["failed"]
    assert failed["text"].startswith("Training job notify-fail failed: "), failed
    # rank 0 was still running (in a barrier) when rank 1 failed, whatever the machine's load
    cause = "rank 1: ValueError: bad batch on purpose; 1 rank stopped as a consequence"
    assert failed["text"].endswith(cause), failed
    assert "Toastify__toast--error" in failed["classes"], failed
    assert failed["buttons"] == ["Open notebook", "Show logs"], failed
    assert result["beforeOpenNotebook"] == "Logs: notify-ok"
    assert result["afterOpenNotebook"] == notebook

    toasts = result["toasts"]
    for name in ("notify-ok", "notify-fail"):
        assert sum(f"Training job {name} " in t for t in toasts) == 1, toasts

    # a hang: its notice, then Stop from the jobs panel, after which the notice is gone
    assert result["hungToast"]["text"].startswith("Training job notify-hang hung"), result
    assert "Toastify__toast--warning" in result["hungToast"]["classes"], result["hungToast"]
    assert result["hangStopEnabled"], result
    assert result["afterStop"]["hungToasts"] == 0, result["afterStop"]
    # the same --name again: nothing of the old run's stop on the new run, nor a hang
    rerun = result["rerun"]
    assert rerun["state"] == "Running", rerun
    assert "stop requested" not in rerun["text"] and "stopping" not in rerun["text"], rerun
    assert not any("stop" in note for note in rerun["notes"]), rerun
    assert "stop requested" not in result["rerunEnded"]["text"], result["rerunEnded"]

    errors = [e for e in result["console"] if e.startswith("pageerror")]
    assert not errors, errors
    for name in ("notify-succeeded.png", "notify-failed.png"):
        assert (OUTPUT / name).stat().st_size > 10_000
