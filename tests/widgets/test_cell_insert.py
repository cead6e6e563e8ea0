"""A cell below a widget's cell: without a kernel (plain IPython) it is the next input at once.

The front end's side (the lab extension inserting below the browser's cell, selected) is
checked in JupyterLab and Notebook 7 by tests/browser/test_cause_browser.py and
test_notebook7_browser.py.
"""

from __future__ import annotations

from IPython.core.interactiveshell import InteractiveShell

from jupyter_disttrain.widgets.cell_insert import insert_below


def test_without_a_kernel_the_cell_is_the_next_input_and_said_so() -> None:
    shell = InteractiveShell.instance()
    told: list[bool] = []
    insert_below(shell, "a1b2", "%%distrain --resume 30\ntrain(60)", told.append)
    assert shell.rl_next_input == "%%distrain --resume 30\ntrain(60)" and told == [False]
