"""JupyterLab's own Debugger panel on a 2x2 job (JupyterLab on 127.0.0.1, Debian's Chromium).

The kernel's debugger is turned on, a breakpoint clicked into the gutter of
the ``%%distrain`` cell's line 5, the cell run: every rank pauses there, the
Callstack shows a stopped rank's cell frame at line 5; ``%distrain_debug
--rank 2 --panel`` makes the panel show rank 2 (Variables: its ``step``);
Next moves rank 2 to line 6 and Continue lets the job succeed.
The panel's screenshot lands in ``test-output/dap/``.
"""

from __future__ import annotations

import re

import pytest

from .conftest import REPO, Lab
from .harness import run_harness, write_notebook

OUTPUT = REPO / "test-output" / "dap"

CELLS = [
    "%load_ext jupyter_disttrain",
    """%%distrain --nodes 2 --nproc 2 --name browser-dap
import torch.distributed as dist
rank = dist.get_rank()
step = rank * 10
step += 1
dist.barrier()
step""",
    "%distrain_debug browser-dap --rank 2 --panel",
]


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_debugger_panel_in_jupyterlab(lab: Lab) -> None:
    notebook = write_notebook(lab.root, "dap.ipynb", CELLS)
    result = run_harness("dap.mjs", lab, notebook, OUTPUT)

    assert result["breakpoints"] == 1
    assert {row["rank"]: row["state"] for row in result["paused"]} == dict.fromkeys(
        range(4), "Paused"
    )
    assert result["stopped"]["name"] == "<module>", result
    assert result["stopped"]["location"].endswith(":5"), result
    assert result["focus"].strip() == "browser-dap: the Debugger panel shows rank 2"
    assert re.search(r"\bstep\s+20\b", result["rank2"]), result
    assert result["focused"]["location"].endswith(":5"), result
    assert result["stepped"]["location"].endswith(":6"), result
    assert re.search(r"\brank\s+2\b", result["rank2Stepped"]), result
    assert result["final"] == "Succeeded"
    errors = [e for e in result["console"] if e.startswith("pageerror")]
    assert not errors, errors
