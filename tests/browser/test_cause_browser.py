"""The cause of a failure and a hang, as a user sees them: JupyterLab at 1440x900, sidebar open.

A 2x2 job where rank 1 raises among lost gloo connections, and a job whose
rank 1 sleeps in its loop (``--hang-after 3``), then stopped from its
dashboard; in the light and the dark theme. Screenshots land in
``test-output/browser-cause/{light,dark}/``.
"""

from __future__ import annotations

import json
import re

import pytest

from .conftest import OUTPUT, Lab
from .harness import run_harness, write_notebook

SHOTS = OUTPUT.parent / "browser-cause"
LOOP = """
import time, torch, torch.distributed as dist
rank = dist.get_rank()
for step in range(400):
    t = torch.ones(4)
    dist.all_reduce(t)
    report(step=step, loss=1.0 / (step + 1))
    {body}
    time.sleep(0.05)"""
CELLS = [
    "%load_ext jupyter_disttrain",
    "%%distrain --nodes 2 --nproc 2 --name cause-fail"
    + LOOP.format(body='if rank == 1 and step == 5: raise ValueError("bad batch at step 5")'),
    "%%distrain --nodes 1 --nproc 2 --name cause-hang --hang-after 3"
    + LOOP.format(body="if rank == 1 and step == 5: time.sleep(3600)"),
]
CAUSE = "rank 1: ValueError: bad batch at step 5; 3 ranks stopped as a consequence"


def rgb(color: str) -> tuple[int, ...]:
    """The red, green and blue of a CSS ``rgb()``/``rgba()`` (plotly keeps alpha apart)."""
    return tuple(int(float(v)) for v in re.findall(r"[\d.]+", color)[:3])


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("theme", ["JupyterLab Light", "JupyterLab Dark"])
def test_failure_and_hang_say_their_cause(lab: Lab, theme: str) -> None:
    settings = lab.root.parent / "lab-settings" / "@jupyterlab/apputils-extension"
    settings.mkdir(parents=True, exist_ok=True)  # read by the page when it loads
    (settings / "themes.jupyterlab-settings").write_text(json.dumps({"theme": theme}))
    notebook = write_notebook(lab.root, "cause.ipynb", CELLS)
    shots = SHOTS / theme.split()[-1].lower()
    result = run_harness("cause.mjs", lab, notebook, shots)

    failed = result["failed"]
    assert failed["state"] == "Failed" and failed["cause"] == CAUSE
    assert failed["rows"].count("Failed") == 1 and failed["rows"][1] == "Failed"
    assert (
        'File "<distrain-cell>"' in failed["traceback"] and "worker.py" not in failed["traceback"]
    )
    assert not failed["stopVisible"]  # nothing left to stop
    # the chart shows the page's background and writes in the theme's ink
    assert failed["plotBackground"] in ("rgba(0, 0, 0, 0)", "transparent")
    assert rgb(failed["plotInk"]) == rgb(failed["themeInk"]), (
        failed["plotInk"],
        failed["themeInk"],
    )
    assert not failed["hscroll"]
    row = result["failedRow"]
    assert row["state"] == "Failed" and row["title"].startswith(f"Failed: {CAUSE}")

    hung = result["hung"]
    assert hung["state"] == "Hung" and hung["rate"] == "stalled"
    assert "rank 1 is in time.sleep" in (hung["diagnosis"] or "")
    stop = hung["stop"]
    assert stop is not None, "Stop must be visible on a hung job"
    assert 0 <= stop["left"] and stop["right"] <= hung["view"]["width"]
    assert 0 <= stop["top"] and stop["bottom"] <= hung["view"]["height"]
    assert not hung["hscroll"]
    assert result["hungRow"]["state"] == "Hung"
    assert result["status"].endswith("1 hung")

    stopped = result["stopped"]
    assert stopped["state"] == "Stopped" and "Failed" not in stopped["rows"]
    assert stopped["cause"] is None and not stopped["stopVisible"]

    errors = [e for e in result["console"] if e.startswith("pageerror")]
    assert not errors, errors
    for name in ("failed-job.png", "hung-job.png", "jupyterlab-cause.png"):
        assert (shots / name).stat().st_size > 10_000
