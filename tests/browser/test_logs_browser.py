"""The "Show logs" of a failed Kubernetes job, in JupyterLab and in Notebook 7 (Debian's Chromium).

One server (``jupyter lab``, which serves Notebook 7's pages too) whose kernels
reach the project's Kubernetes API emulator runs a 2-node PyTorchJob whose rank
1 raises; the failure notification's "Show logs" opens the job's logs, which
show rank 1's traceback and the error's own line, not "no output yet".
Screenshots land in ``test-output/logs/``.
"""

from __future__ import annotations

import textwrap
from collections.abc import Iterator

import pytest

from tests.k8s_emulator.emulator import Emulator
from tests.k8s_emulator.podnet import pod_interface

from .conftest import REPO, Lab, end_sessions, serve_lab
from .harness import page_errors, run_harness, write_notebook

OUTPUT = REPO / "test-output" / "logs"

#: Rank 1 raises having printed one line; rank 0 would sleep on.
FAILING = textwrap.dedent(
    """
    import time, torch.distributed as dist
    print("rank", dist.get_rank(), "up", flush=True)
    if dist.get_rank() == 1:
        raise ValueError("bad shard on rank 1")
    time.sleep(300)
    """
)


@pytest.fixture(scope="module")
def cluster_lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    """JupyterLab whose kernels reach an emulated Kubernetes cluster (KUBECONFIG)."""
    tmp_path = tmp_path_factory.mktemp("logs-browser")
    env = {"GLOO_SOCKET_IFNAME": pod_interface(), "NCCL_SOCKET_IFNAME": pod_interface()}
    with Emulator(env=env) as emulator, pytest.MonkeyPatch.context() as patch:
        patch.setenv("KUBECONFIG", str(emulator.write_kubeconfig(tmp_path / "kubeconfig")))
        yield from serve_lab(tmp_path)


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("app", ["lab", "notebook"])
def test_show_logs_of_a_failed_kubernetes_job_shows_the_failing_ranks_traceback(
    cluster_lab: Lab, browser_ready: None, app: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    name = f"k8s-logs-{app}"
    cells = [
        "%load_ext jupyter_disttrain\n%distrain_config live=none",
        f"%%distrain --backend kubernetes --nodes 2 --name {name} --timeout 240\n{FAILING}",
    ]
    notebook = write_notebook(cluster_lab.root, f"{name}.ipynb", cells)
    monkeypatch.setenv("LOGS_APP", app)
    monkeypatch.setenv("LOGS_JOB", f"kubernetes/{name}")
    try:
        result = run_harness("logs.mjs", cluster_lab, notebook, OUTPUT / app)
    finally:
        end_sessions(cluster_lab)  # the next page would ask which kernel to take

    # the failing rank's error, as the dashboard says it; not the operator's backoff message
    assert result["toast"].startswith(
        f"Training job {name} failed: rank 1: ValueError: bad shard on rank 1"
    ), result
    assert result["visible"], result
    logs = result["logs"]
    assert "no output yet" not in logs, result
    lines = logs.splitlines()
    assert "[rank 1] Traceback (most recent call last):" in lines, logs
    assert "[rank 1] ValueError: bad shard on rank 1" in lines, logs
    assert lines.count("[rank 1] Traceback (most recent call last):") == 1, logs
    assert "[rank 0] rank 0 up" in lines and "##distrain" not in logs, logs
    errors = page_errors(result)
    assert not errors, errors
    assert (OUTPUT / app / f"logs-{app}.png").stat().st_size > 5_000
