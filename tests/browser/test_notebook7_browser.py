"""The dashboard and the checkpoint browser in Notebook 7 (``jupyter notebook``), in Chromium.

A notebook served by Notebook 7 on 127.0.0.1 runs a 1x2 local job that
reports a loss and saves a checkpoint every 10 steps until the browser
script creates a file (so the test, not the machine's speed, decides when it
ends). Its plotly curve is sampled while it runs and must grow; the
checkpoint browser, opened mid-run, lists the checkpoints so far, and after
the job ended, Refresh lists them all and a row shows its contents. The lab
extension's end notification shows here too, and its Show logs opens the
logs below the notebook (Notebook 7's main area holds one document).
Screenshots land in ``test-output/notebook7/``.
"""

from __future__ import annotations

import pytest

from .conftest import REPO, Lab
from .harness import page_errors, run_harness, write_notebook

OUTPUT = REPO / "test-output" / "notebook7"

CELLS = [
    "%load_ext jupyter_disttrain",
    """%%distrain --nodes 1 --nproc 2 --name nb7-train --checkpoint-dir {ROOT}/checkpoints
import os
import time

import torch
import torch.distributed as dist

rank = dist.get_rank()
model = torch.nn.Linear(4, 2)
step = 0
while step < 3000 and not os.path.exists("{ROOT}/stop-training"):
    report(step=step, loss=1.0 / (step + 1) + 0.05 * rank)
    if every(10, step):
        state = {"model": model.state_dict(), "step": step}
        save_checkpoint(state, step, {"loss": 1.0 / (step + 1)})
    time.sleep(0.1)
    step += 1""",
    "%distrain_checkpoints nb7-train",
]


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_dashboard_and_checkpoints_in_notebook7(notebook7: Lab) -> None:
    cells = [c.replace("{ROOT}", str(notebook7.root)) for c in CELLS]
    notebook = write_notebook(notebook7.root, "nb7.ipynb", cells)
    result = run_harness("notebook7.mjs", notebook7, notebook, OUTPUT)

    assert result["title"].startswith("nb7"), result["title"]
    samples = result["samples"]
    assert all(s["state"] == "Running" for s in samples), samples
    # every curve (2 ranks and the mean) grew while the job ran
    for trace in range(3):
        counts = [s["points"][trace] for s in samples]
        assert counts == sorted(counts) and counts[-1] > counts[0], samples
    final = result["final"]
    assert final["state"] == "Succeeded" and result["gate"] == 201
    # every step of each rank (each stops at the file on its own) and of the mean
    steps = final["steps"]
    assert len(steps) == 2 and min(steps) >= 45, final
    assert sorted(final["points"]) == sorted([s + 1 for s in [*steps, max(steps)]]), final
    last = steps[0]  # rank 0 saves the checkpoints

    # the lab extension in Notebook 7: the end notification, logs opened below the notebook
    toast = result["toast"]
    assert toast["text"].startswith("Training job nb7-train succeeded after "), toast
    assert toast["buttons"] == ["Open notebook", "Show logs"], toast
    logs = result["logs"]
    assert logs == {"visible": True, "notebookVisible": True, "area": True}, logs

    mid = result["checkpointsMidRun"]
    assert result["stateMidRun"] == "Running"
    assert mid and all(r["status"] == "ok" for r in mid), mid
    after = result["checkpointsAfter"]
    assert len(after) > len(mid), (mid, after)
    assert [r["step"] for r in after] == list(range(last // 10 * 10, 0, -10)), after
    assert "step 20" in result["detail"] and "model.weight" in result["detail"], result["detail"]
    resume = result["resume"]  # right below the browser's cell, selected, at once
    assert resume["after"] == resume["before"] + 1 and resume["index"] >= 0, resume
    assert "--resume 20" in resume["source"].splitlines()[0], resume
    assert resume["active"] and resume["activeCells"] == 1 and resume["commandMode"] == "command"
    assert resume["said"] == "the cell below resumes from step 20: run it to start the job"

    errors = page_errors(result)
    assert not errors, errors
    for name in ("notebook7-dashboard.png", "notebook7-checkpoints.png"):
        assert (OUTPUT / name).stat().st_size > 5_000
