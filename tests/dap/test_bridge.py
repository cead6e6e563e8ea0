"""The kernel's DAP sees a 2x2 local job's ranks: a DAP client against a real kernel.

Breakpoints set on the ``%%distrain`` cell (``dumpCell`` + ``setBreakpoints``)
stop every rank; one set while they are paused (a condition included) reaches
them; ``threads``, ``stackTrace``, ``scopes``/``variables``, ``evaluate``,
``next`` and ``continue`` act per rank.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from jupyter_disttrain.backends.local import jobdir
from jupyter_disttrain.dap import ids
from tests.dap.dapclient import DapClient
from tests.kernel_harness import Kernel
from tests.kernel_harness import kernel as start_kernel

pytestmark = pytest.mark.slow

CELL = """%%distrain --nodes 2 --nproc 2 --name {name}
import torch.distributed as dist
rank = dist.get_rank()
step = rank * 10
step += 1
dist.barrier()
step
"""
WAIT = 240.0


@pytest.fixture
def kernel(home: Path) -> Iterator[Kernel]:
    with start_kernel(str(home)) as k:
        yield k


def logs(name: str) -> str:
    directory = jobdir.job_dir(name)
    return "\n".join(
        f"--- {p.name}\n{p.read_text()[-3000:]}"
        for p in sorted(jobdir.rank_logs(directory).values())
    )


def rank_of(event: dict[str, Any]) -> int | None:
    where = ids.of_thread(event.get("body", {}).get("threadId"))
    return None if where is None else where.rank


def test_ranks_are_threads_that_stop_step_show_and_continue(kernel: Kernel, home: Path) -> None:
    name = "dap-2x2"
    code = CELL.format(name=name)
    kernel.execute(f"import os; os.environ['DISTRAIN_HOME'] = {str(home)!r}")
    kernel.execute("%load_ext jupyter_disttrain")
    dap = DapClient(kernel)
    dap.start()
    path = dap.ok("dumpCell", code=code)["sourcePath"]
    dap.ok(
        "setBreakpoints",
        source={"path": path},
        breakpoints=[{"line": 5}],
        lines=[5],
        sourceModified=False,
    )
    kernel.execute(code + "\n")
    show = lambda: logs(name)  # noqa: E731
    stops = [
        dap.wait_event(lambda e: e["event"] == "stopped", "stop", WAIT, show) for _ in range(4)
    ]
    assert sorted(rank_of(e) for e in stops) == [0, 1, 2, 3], stops
    assert {e["body"]["reason"] for e in stops} == {"breakpoint"}

    dap.ok(  # set while the ranks are paused: they take it at once
        "setBreakpoints",
        source={"path": path},
        breakpoints=[{"line": 5}, {"line": 7, "condition": "rank == 3"}],
        lines=[5, 7],
        sourceModified=False,
    )
    threads = {t["name"]: t["id"] for t in dap.ok("threads")["threads"]}
    ranks = {f"rank {r} (node {r // 2})" for r in range(4)}
    assert ranks <= set(threads), threads
    two = threads["rank 2 (node 1)"]

    frames = dap.ok("stackTrace", threadId=two)["stackFrames"]
    assert (frames[0]["line"], frames[0]["source"]["path"]) == (5, path), frames
    scopes = dap.ok("scopes", frameId=frames[0]["id"])["scopes"]
    assert [s["name"] for s in scopes] == ["Locals", "Globals"]
    shown = {
        v["name"]: v["value"]
        for v in dap.ok("variables", variablesReference=scopes[0]["variablesReference"])[
            "variables"
        ]
    }
    assert (shown["rank"], shown["step"]) == ("2", "20"), shown
    assert (
        dap.ok("evaluate", expression="step * 2 + rank", frameId=frames[0]["id"], context="repl")[
            "result"
        ]
        == "42"
    )
    failed = dap.request("evaluate", expression="nope", frameId=frames[0]["id"], context="repl")
    assert not failed["success"] and "NameError" in failed["message"]

    dap.ok("next", threadId=two)
    moved = dap.wait_event(lambda e: e["event"] == "stopped", "rank 2's step", WAIT, show)
    assert (rank_of(moved), moved["body"]["reason"]) == (2, "step")
    frames = dap.ok("stackTrace", threadId=two)["stackFrames"]
    assert frames[0]["line"] == 6, frames
    one = threads["rank 1 (node 0)"]
    other = dap.ok("stackTrace", threadId=one)["stackFrames"]
    assert other[0]["line"] == 5, other  # rank 1 stayed where it stopped

    for rank in (0, 1, 2):
        dap.ok("continue", threadId=threads[f"rank {rank} (node {rank // 2})"], singleThread=True)
        dap.wait_event(
            lambda e, r=rank: e["event"] == "continued" and rank_of(e) == r,
            f"rank {rank} runs",
            WAIT,
            show,
        )
    three = threads["rank 3 (node 1)"]
    assert dap.ok("continue", threadId=three)["allThreadsContinued"] is True
    last = dap.wait_event(
        lambda e: e["event"] == "stopped", "rank 3's conditional stop", WAIT, show
    )
    assert rank_of(last) == 3
    frames = dap.ok("stackTrace", threadId=three)["stackFrames"]
    assert frames[0]["line"] == 7, frames
    # JupyterLab's Continue names thread 1 once its last stopped thread is forgotten
    assert dap.ok("continue", threadId=1)["allThreadsContinued"] is True
    state = kernel.run(
        f"from jupyter_disttrain import service as d; print(d.registered()[{name!r}].wait(120))"
    )
    assert state.strip() == "Succeeded", show()
    assert not any(t["name"].startswith("rank ") for t in dap.ok("threads")["threads"])


SPIN = """%%distrain --nodes 2 --nproc 2 --name {name}
import time
import torch.distributed as dist
rank = dist.get_rank()
step, limit = 0, 10**9
while step < limit:
    step += 1
    time.sleep(0.01)
step
"""
#: The loop's lines as the panel numbers the cell (the magic's line is line 1).
LOOP_LINES = (6, 7, 8)


def test_a_running_rank_pauses_and_takes_breakpoints_when_the_panel_asks(
    kernel: Kernel, home: Path
) -> None:
    name = "dap-pause"
    kernel.execute(f"import os; os.environ['DISTRAIN_HOME'] = {str(home)!r}")
    kernel.execute("%load_ext jupyter_disttrain")
    dap = DapClient(kernel)
    dap.start()
    code = SPIN.format(name=name)
    path = dap.ok("dumpCell", code=code)["sourcePath"]
    kernel.execute(code + "\n")
    show = lambda: logs(name)  # noqa: E731
    status = f"from jupyter_disttrain import service as d; print(d.registered()[{name!r}].status())"
    deadline = time.monotonic() + WAIT
    while kernel.run(status).strip() != "Running":
        assert time.monotonic() < deadline, show()
        time.sleep(0.2)
    threads = {t["name"]: t["id"] for t in dap.ok("threads")["threads"]}
    one = threads["rank 1 (node 0)"]

    dap.ok("pause", threadId=one)
    stop = dap.wait_event(lambda e: e["event"] == "stopped", "rank 1's pause", WAIT, show)
    assert (rank_of(stop), stop["body"]["reason"]) == (1, "pause"), stop
    frames = dap.ok("stackTrace", threadId=one)["stackFrames"]
    assert frames[0]["line"] in LOOP_LINES, frames
    assert dap.ok("evaluate", expression="step > 0", frameId=frames[0]["id"])["result"] == "True"
    paused = kernel.run(f"print([p.rank for p in d.registered()[{name!r}].paused()])")
    assert paused.strip() == "[1]", show()  # the other ranks run on

    dap.ok("continue", threadId=one, singleThread=True)
    dap.wait_event(
        lambda e: e["event"] == "continued" and rank_of(e) == 1, "rank 1 runs", WAIT, show
    )

    # a breakpoint set in the gutter while the job runs reaches its running ranks
    dap.ok(
        "setBreakpoints",
        source={"path": path},
        breakpoints=[{"line": 8, "condition": "rank == 3"}],
        lines=[8],
        sourceModified=False,
    )
    hit = dap.wait_event(lambda e: e["event"] == "stopped", "rank 3's breakpoint", WAIT, show)
    assert (rank_of(hit), hit["body"]["reason"]) == (3, "breakpoint"), hit
    three = threads["rank 3 (node 1)"]
    assert dap.ok("stackTrace", threadId=three)["stackFrames"][0]["line"] == 8
    state = kernel.run(f"print(d.registered()[{name!r}].stop())")
    assert state.strip() == "Stopped", show()


def test_a_session_cells_gutter_breakpoint_stops_its_ranks(kernel: Kernel, home: Path) -> None:
    name = "dap-sess"
    kernel.execute(f"import os; os.environ['DISTRAIN_HOME'] = {str(home)!r}")
    kernel.execute("%load_ext jupyter_disttrain")
    kernel.execute(f"%distrain_session start {name} --nodes 2 --nproc 1", timeout=WAIT)
    kernel.execute(f"%%distrain --session {name}\nimport torch.distributed as dist\nbase = 5\n")
    dap = DapClient(kernel)
    dap.start()
    code = (
        f"%%distrain --session {name}\n"
        "rank = dist.get_rank()\n"
        "value = base + rank\n"
        "value += 10\n"
        "dist.barrier()\n"
        "value"
    )
    path = dap.ok("dumpCell", code=code)["sourcePath"]
    dap.ok(
        "setBreakpoints",
        source={"path": path},
        breakpoints=[{"line": 4}],
        lines=[4],
        sourceModified=False,
    )
    running = kernel.start(code)
    show = lambda: logs(name)  # noqa: E731
    stops = [
        dap.wait_event(lambda e: e["event"] == "stopped", "stop", WAIT, show) for _ in range(2)
    ]
    assert sorted(rank_of(e) for e in stops) == [0, 1], stops
    threads = {t["name"]: t["id"] for t in dap.ok("threads")["threads"]}
    one = threads["rank 1 (node 1)"]
    frames = dap.ok("stackTrace", threadId=one)["stackFrames"]
    assert (frames[0]["line"], frames[0]["source"].get("path")) == (4, path), frames
    assert dap.ok("evaluate", expression="value", frameId=frames[0]["id"])["result"] == "6"
    assert dap.ok("continue", threadId=one)["allThreadsContinued"] is True
    deadline = time.monotonic() + WAIT
    while not any(
        m["parent_header"].get("msg_id") == running
        and m["msg_type"] == "status"
        and m["content"]["execution_state"] == "idle"
        for m in kernel.iopub
    ):
        assert time.monotonic() < deadline, show()
        kernel.drain(0.1)
    after = kernel.run(
        "from jupyter_disttrain import service as d\n"
        f"print(d.default_service().session({name!r}).run('value'))"
    )
    assert after.strip() == "15", show()  # rank 0 ran the rest of the cell after Continue
    kernel.execute(f"%distrain_session stop {name}", timeout=WAIT)
