"""A chart whose front end overran anywidget's initialization budget still draws the job.

anywidget (0.9.14 to 0.11 at least) drops every message to a model whose
front end took longer than 2 s to initialize, for the model's whole life: on
a page short of CPU the loss chart would stay empty while the rank table
counts steps. The page here cuts the first anywidget model's budget to 0 ms
(the chart's: the dashboard opens no other) and runs a 1x2 job reporting 60
steps. The chart's model hears nothing, says so, and the kernel opens a new
one: the chart reaches step 59 with nothing held back. Screenshots land in
``test-output/browser-deaf/``.
"""

from __future__ import annotations

import pytest

from jupyter_disttrain.widgets.streaming_figure import REOPENS

from .conftest import OUTPUT, Lab
from .harness import page_errors, run_harness, write_notebook

SHOTS = OUTPUT.parent / "browser-deaf"
CELLS = [
    "%load_ext jupyter_disttrain",
    """%%distrain --nodes 1 --nproc 2 --name deaf-chart
import time

for step in range(60):
    report(step=step, loss=1.0 / (step + 1))
    time.sleep(0.25)""",
    # the kernel's side: how many new comms each chart opened
    "import ipywidgets\nfrom jupyter_disttrain.widgets.streaming_figure import StreamingFigure\n"
    "charts = ipywidgets.widgets.widget._instances.values()\n"
    "print('reopens', [w.reopens for w in charts if isinstance(w, StreamingFigure)])",
]


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_chart_whose_first_model_hears_nothing_still_draws_every_step(lab: Lab) -> None:
    notebook = write_notebook(lab.root, "deaf.ipynb", CELLS)
    result = run_harness("deaf.mjs", lab, notebook, SHOTS)

    log = (SHOTS / "harness.log").read_text()
    assert result["budgets"]["cut"] == 1, (result, log)  # the chart's model overran it
    # the kernel opened a new one (another, should that one overrun its budget too)
    reopens = result["reopens"]
    assert reopens in [f"reopens [{n}]" for n in range(1, REOPENS + 1)], (result, log)
    chart = result["chart"]
    assert chart["lastX"] == 59 and chart["held"] == "0", (result, log)
    assert chart["traces"] >= 2 and chart["plots"] == 1, result  # ranks and mean, one chart
    assert result["budgets"]["kept"] >= 1, result  # the new model's budget was its own
    assert not page_errors(result), result["console"]
