"""A chart and a table whose front ends overran anywidget's budget still show the kernel's state.

anywidget (0.9.14 to 0.11 at least) drops every message to a model whose
front end took longer than 2 s to initialize, for the model's whole life: on
a page short of CPU the loss chart would stay empty while the rank table
counts steps. The page here cuts the first anywidget model's budget to 0 ms
(the chart's: the dashboard opens no other) and runs a 1x2 job reporting 60
steps, then cuts the checkpoint table's budget too. The chart's model hears
nothing, says so, and the kernel opens a new one: the chart reaches step 59
with nothing held back. The table's model, clicked on its step header while
deaf, is replaced too: its rows read ascending by step, as the kernel sorted
them. Screenshots land in ``test-output/browser-deaf/``.
"""

from __future__ import annotations

import ast

import pytest

from jupyter_disttrain.widgets.reopen import REOPENS

from .conftest import OUTPUT, Lab
from .harness import page_errors, run_harness, write_notebook

SHOTS = OUTPUT.parent / "browser-deaf"
CELLS = [
    "%load_ext jupyter_disttrain\nimport os\nCKPT = os.path.abspath('deaf-checkpoints')",
    """%%distrain --nodes 1 --nproc 2 --name deaf-chart --checkpoint-dir {CKPT}
import time
from jupyter_disttrain import save_checkpoint

for step in range(60):
    report(step=step, loss=1.0 / (step + 1))
    if step % 20 == 0:
        save_checkpoint({"step": step}, step)
    time.sleep(0.25)""",
    "%distrain_checkpoints deaf-chart",
    # the kernel's side: how many new comms each chart and table opened
    "import ipywidgets\nfrom jupyter_disttrain.widgets.reopen import Reopening\n"
    "alive = ipywidgets.widgets.widget._instances.values()\n"
    "print(sorted((type(w).__name__, w.reopens) for w in alive if isinstance(w, Reopening)))",
]


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_chart_and_a_table_whose_models_hear_nothing_are_shown_anew(lab: Lab) -> None:
    notebook = write_notebook(lab.root, "deaf.ipynb", CELLS)
    result = run_harness("deaf.mjs", lab, notebook, SHOTS)

    log = (SHOTS / "harness.log").read_text()
    assert result["budgets"]["cut"] == 2, (result, log)  # the chart's and the table's
    # the kernel opened a new one (another, should that one overrun its budget too)
    reopened = dict(ast.literal_eval(result["reopens"]))
    assert set(reopened) == {"StreamingFigure", "CheckpointTable"}, (result, log)
    assert all(1 <= n <= REOPENS for n in reopened.values()), (result, log)
    chart = result["chart"]
    assert chart["lastX"] == 59 and chart["held"] == "0", (result, log)
    assert chart["traces"] >= 2 and chart["plots"] == 1, result  # ranks and mean, one chart
    assert result["budgets"]["kept"] >= 2, result  # the new models' budgets were their own
    # the table heard the header click: sorted by step, ascending, as the kernel has it
    table = result["table"]
    assert table["steps"] == [0, 20, 40] and table["header"].startswith("step \u25b2"), result
    # anywidget's own rejection of the two models it stopped delivering to, and nothing else
    assert not page_errors(result), result["console"]
