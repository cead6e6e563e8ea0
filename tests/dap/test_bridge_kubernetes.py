"""The kernel's DAP reaches rank 3 in node 1's pod of a job on the Kubernetes emulator.

A conditional gutter breakpoint (``rank == 3``) stops only that rank; its
thread is named after its pod's node, its frame, locals, an evaluation and a
step come through the API server's port-forward, and Continue lets the job
succeed.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.dap.dapclient import DapClient
from tests.dap.test_bridge import CELL, WAIT, rank_of
from tests.k8s_emulator.emulator import Emulator
from tests.k8s_emulator.podnet import pod_interface
from tests.kernel_harness import Kernel
from tests.kernel_harness import kernel as start_kernel

pytestmark = pytest.mark.slow


@pytest.fixture
def cluster_kernel(home: Path, tmp_path: Path) -> Iterator[Kernel]:
    with Emulator(env={"GLOO_SOCKET_IFNAME": pod_interface()}) as emulator:
        config = emulator.write_kubeconfig(tmp_path / "kubeconfig")
        with start_kernel(str(home), env={"KUBECONFIG": str(config)}) as k:
            yield k


def test_rank_3_in_node_1s_pod_stops_shows_steps_and_continues(
    cluster_kernel: Kernel, home: Path
) -> None:
    kernel = cluster_kernel
    name = "dapk-2x2"
    code = CELL.format(name=name).replace("%%distrain", "%%distrain --backend kubernetes", 1)
    kernel.execute(f"import os; os.environ['DISTRAIN_HOME'] = {str(home)!r}")
    kernel.execute("%load_ext jupyter_disttrain")
    kernel.execute("from jupyter_disttrain import service as d")
    dap = DapClient(kernel)
    dap.start()
    path = dap.ok("dumpCell", code=code)["sourcePath"]
    dap.ok(
        "setBreakpoints",
        source={"path": path},
        breakpoints=[{"line": 5, "condition": "rank == 3"}],
        lines=[5],
        sourceModified=False,
    )

    def show() -> str:
        return kernel.run(f"print(d.registered()[{name!r}].logs())", timeout=60)

    kernel.execute(code + "\n")
    stop = dap.wait_event(lambda e: e["event"] == "stopped", "rank 3's stop", WAIT, show)
    assert rank_of(stop) == 3, stop
    threads = {t["name"]: t["id"] for t in dap.ok("threads")["threads"]}
    three = threads["rank 3 (node 1)"]
    assert stop["body"]["threadId"] == three
    frames = dap.ok("stackTrace", threadId=three)["stackFrames"]
    assert (frames[0]["line"], frames[0]["source"]["path"]) == (5, path), frames
    scopes = dap.ok("scopes", frameId=frames[0]["id"])["scopes"]
    variables = dap.ok("variables", variablesReference=scopes[0]["variablesReference"])
    shown = {v["name"]: v["value"] for v in variables["variables"]}
    assert (shown["rank"], shown["step"]) == ("3", "30"), shown
    assert dap.ok("evaluate", expression="rank + step", frameId=frames[0]["id"])["result"] == "33"
    dap.ok("next", threadId=three)
    moved = dap.wait_event(lambda e: e["event"] == "stopped", "rank 3's step", WAIT, show)
    assert (rank_of(moved), moved["body"]["reason"]) == (3, "step")
    assert dap.ok("stackTrace", threadId=three)["stackFrames"][0]["line"] == 6
    dap.ok("continue", threadId=three)
    state = kernel.run(f"print(d.registered()[{name!r}].wait(180))", timeout=240)
    assert state.strip() == "Succeeded", show()
