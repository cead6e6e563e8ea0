"""The dashboard in a real browser: JupyterLab on 127.0.0.1, Debian's Chromium via playwright-core.

A notebook runs a 2x2 local job; from the DOM, its worker table reaches 4
Succeeded rows, its plot has lines with points and its log panel shows
rank-attributed lines. A second, long job is stopped with its dashboard's
Stop button and shows Stopped. Screenshots land in ``test-output/browser/``.
"""

from __future__ import annotations

import pytest

from .conftest import OUTPUT, Lab
from .harness import run_harness, write_notebook

CELLS = [
    "%load_ext jupyter_disttrain",
    """%%distrain --nodes 2 --nproc 2 --name browser-ok
import time
import torch.distributed as dist

rank = dist.get_rank()
for step in range(30):
    report(step=step, loss=1.0 / (step + 1) + 0.02 * rank)
    if step % 10 == 0:
        print(f"epoch {step // 10} done")
    time.sleep(0.05)
print(f"rank {rank} finished")""",
    """%%distrain --nodes 1 --nproc 2 --name browser-stop
import time

for step in range(3000):
    report(step=step, loss=1.0 / (step + 1))
    print(f"step {step}")
    time.sleep(0.1)""",
]


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_dashboard_in_jupyterlab(lab: Lab) -> None:
    notebook = write_notebook(lab.root, "dashboard.ipynb", CELLS)
    result = run_harness("dashboard.mjs", lab, notebook, OUTPUT)

    ok = result["ok"]
    assert ok["state"] == "Succeeded"
    assert [r["rank"] for r in ok["rows"]] == [0, 1, 2, 3]
    assert {r["state"] for r in ok["rows"]} == {"Succeeded"}
    assert all(r["step"] == "29" for r in ok["rows"])
    points = [t["points"] for t in ok["traces"]]
    assert len(points) == 5, points  # 4 ranks and the mean
    assert min(points) >= 10, points
    labels = {(line["ranks"], line["label"]) for line in ok["logs"]}
    assert ("0-3", "[ranks 0-3]") in labels  # "epoch N done" folded over the ranks
    finished = [line["text"] for line in ok["logs"] if line["ranks"] == "2"]
    assert "[rank 2] rank 2 finished" in finished
    assert ok["comms"] == "gloo"

    before = result["beforeStop"]
    assert before["state"] == "Running" and result["stopEnabled"]
    # the running job's points reached the browser as appends, not as whole traces
    assert int(before["plot"]["distrainAppends"]) >= 1
    assert int(before["plot"]["distrainAppendedPoints"]) >= 3
    stopped = result["stopped"]
    assert stopped["state"] == "Stopped"
    assert {r["state"] for r in stopped["rows"]} == {"Stopped"}
    assert not stopped["stopEnabled"]
    assert result["stopSeconds"] < 30

    errors = [e for e in result["console"] if e.startswith("pageerror")]
    assert not errors, errors
    for name in ("dashboard-succeeded.png", "dashboard-stopped.png", "jupyterlab.png"):
        assert (OUTPUT / name).stat().st_size > 10_000
