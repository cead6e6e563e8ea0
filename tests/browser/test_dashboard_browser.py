"""The dashboard in a real browser: JupyterLab on 127.0.0.1, Debian's Chromium via playwright-core.

A notebook runs a 2x2 local job; from the DOM, its worker table reaches 4
Succeeded rows, its plot has lines with points and its log panel shows
rank-attributed lines. A second, long job is stopped with its dashboard's
Stop button and shows Stopped; the Stop the click disabled looks disabled.
A ``--wait`` job whose rank 1 raises before its first step shows no Stop nor
Where? beside the note saying the busy kernel answers no button, and its
first step reads unfinished, not "first step 0s", on its dashboard and in the
jobs panel. Screenshots land in ``test-output/browser/``.
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
    """%%distrain --nodes 1 --nproc 2 --name browser-wait --wait
import time
import torch.distributed as dist

time.sleep(4)
if dist.get_rank() == 1:
    raise ValueError("no first step")""",
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
    # the light theme's Stop: enabled it looks it; disabled by the click ("Stopping…") it looks
    # disabled (faded, no pointer), caught as the click disables it, before it goes
    looks = result["stopLooks"]
    assert not looks["disabled"] and looks["opacity"] == 1, looks
    assert looks["cursor"] != "not-allowed", looks
    stopping = result["stoppingLooks"]
    assert stopping, "the click never showed a disabled Stop"
    for seen in stopping:
        assert seen["opacity"] <= 0.5 and seen["cursor"] == "not-allowed", stopping
    stopped = result["stopped"]
    assert stopped["state"] == "Stopped"
    assert {r["state"] for r in stopped["rows"]} == {"Stopped"}
    assert not stopped["stopEnabled"]
    assert result["stopSeconds"] < 30

    waited = result["waited"]  # --wait: the note while it runs, never a Stop beside it
    assert waited["watch"]["noted"] > 0 and not waited["watch"]["buttons"], waited
    first = [p for p in waited["phases"] if p["phase"] == "first_step"]
    assert first and first[0]["state"] == "unfinished", waited  # not current, not done
    assert first[0]["text"].endswith("(not finished)"), waited
    assert waited["firstStep"] is None, waited  # no "(0s to first step)"
    assert not any(p["state"] == "current" for p in waited["phases"]), waited
    assert not any("(--wait)" in note for note in waited["notes"]), waited  # ended: no note
    # the jobs panel says the same: the phase it ended in unfinished, not bold as the current one
    panel = [p for p in waited["panel"]["phases"] if p["phase"] == "first_step"]
    assert panel and panel[0]["state"] == "unfinished", waited["panel"]
    assert panel[0]["text"].endswith("(not finished)"), waited["panel"]
    assert int(panel[0]["weight"]) < 600, waited["panel"]
    assert not any(p["state"] == "active" for p in waited["panel"]["phases"]), waited["panel"]

    errors = [e for e in result["console"] if e.startswith("pageerror")]
    assert not errors, errors
    shots = ("dashboard-succeeded.png", "dashboard-stopped.png", "jupyterlab.png")
    for name in (*shots, "dashboard-wait-failed.png", "panel-wait.png"):
        assert (OUTPUT / name).stat().st_size > 10_000
