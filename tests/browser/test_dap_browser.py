"""JupyterLab's own Debugger panel on a 2x2 job (JupyterLab on 127.0.0.1, Debian's Chromium).

The kernel's debugger is turned on, a breakpoint clicked into the gutter of
the ``%%distrain`` cell's line 5, the cell run: every rank pauses there, the
Callstack shows a stopped rank's cell frame at line 5; ``%distrain_debug
--rank 2 --panel`` makes the panel show rank 2 (Variables: its ``step``);
Next moves rank 2 to line 6 and Continue lets the job succeed. The same in
Notebook 7 (its debugger panel opened from the View menu). The same job
on the Kubernetes emulator shows rank 3, in node 1's pod (through the API
server's port-forward). The panel's screenshots land in ``test-output/dap*/``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.k8s_emulator.emulator import Emulator
from tests.k8s_emulator.podnet import pod_interface

from .conftest import REPO, Lab, serve_lab
from .harness import page_errors, run_harness, write_notebook

OUTPUT = REPO / "test-output" / "dap"
OUTPUT_K8S = REPO / "test-output" / "dap-kubernetes"

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
    check(result, rank=2)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_debugger_panel_in_notebook7(notebook7: Lab, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DAP_APP", "notebook")
    notebook = write_notebook(notebook7.root, "dap.ipynb", CELLS)
    result = run_harness("dap.mjs", notebook7, notebook, REPO / "test-output" / "dap-notebook7")
    check(result, rank=2)


@pytest.fixture
def cluster_lab(
    tmp_path: Path, browser_ready: None, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Lab]:
    """JupyterLab whose kernels reach an emulated Kubernetes cluster (KUBECONFIG)."""
    with Emulator(env={"GLOO_SOCKET_IFNAME": pod_interface()}) as emulator:
        config = emulator.write_kubeconfig(tmp_path / "kubeconfig")
        monkeypatch.setenv("KUBECONFIG", str(config))
        yield from serve_lab(tmp_path)


@pytest.mark.slow
@pytest.mark.timeout(900)  # above the harness's own limit (840 s), which then says where it was
def test_debugger_panel_reaches_rank_3_in_node_1s_pod(
    cluster_lab: Lab, monkeypatch: pytest.MonkeyPatch
) -> None:
    name = "browser-dapk"
    cells = [
        CELLS[0],
        CELLS[1].replace("--name browser-dap", f"--backend kubernetes --name {name}"),
        f"%distrain_debug {name} --rank 3 --panel",
    ]
    monkeypatch.setenv("DAP_RANK", "3")
    monkeypatch.setenv("DAP_JOB", name)
    notebook = write_notebook(cluster_lab.root, "dapk.ipynb", cells)
    result = run_harness("dap.mjs", cluster_lab, notebook, OUTPUT_K8S)
    check(result, rank=3, name=name)
    three = next(row for row in result["paused"] if row["rank"] == 3)
    assert three["node"] == "1" and "worker" in three["host"], three  # node 1's pod


def check(result: dict[str, Any], rank: int, name: str = "browser-dap") -> None:
    """What the harness saw: every rank paused at line 5, ``rank`` shown, stepped, the end."""
    assert result["breakpoints"] == 1
    assert {row["rank"]: row["state"] for row in result["paused"]} == dict.fromkeys(
        range(4), "Paused"
    )
    assert result["stopped"]["name"] == "<module>", result
    assert result["stopped"]["location"].endswith(":5"), result
    assert result["focus"].strip() == f"{name}: the Debugger panel shows rank {rank}"
    assert re.search(rf"\bstep\s+{rank * 10}\b", result["rank2"]), result
    assert result["focused"]["location"].endswith(":5"), result
    assert result["stepped"]["location"].endswith(":6"), result
    assert re.search(rf"\brank\s+{rank}\b", result["rank2Stepped"]), result
    assert result["final"] == "Succeeded"
    errors = page_errors(result)
    assert not errors, errors
