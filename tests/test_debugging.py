"""Debugging ranks of a real local 2x2 gloo job from the notebook's API (breakpoint, cast,
post-mortem), and the channel's authentication."""

from __future__ import annotations

import socket
import textwrap
import time
from collections.abc import Iterator
from typing import Any

import pytest

from jupyter_disttrain.backends.base import BackendError
from jupyter_disttrain.backends.local import LocalBackend, jobdir
from jupyter_disttrain.debugging import DebugError
from jupyter_disttrain.job import Job
from jupyter_disttrain.payload import build_payload
from jupyter_disttrain.runtime import debugwire as wire
from jupyter_disttrain.runtime import framing
from jupyter_disttrain.spec import JobSpec
from tests.conftest import assert_no_processes
from tests.waiting import wait_for

pytestmark = pytest.mark.slow

LOOP = textwrap.dedent(
    """
    import torch, torch.distributed as dist
    rank = dist.get_rank()
    total = 0.0
    for step in range(3):
        x = torch.ones(2, 3) * (step + 1)
        if rank == 1 and step == 1:
            breakpoint()
            y = x * 2
        t = torch.tensor([float(step)])
        dist.all_reduce(t)
        total += t.item()
    total
    """
).lstrip()
#: pdb stops at the line after ``breakpoint()``.
STOP_LINE = LOOP.splitlines().index("        breakpoint()") + 2


def start(name: str, cell: str, mode: str = "fork", **spec: Any) -> Job:
    spec_ = JobSpec(name, nodes=2, nproc=2, **spec)
    backend = LocalBackend(mode)
    plan = backend.plan(spec_, build_payload(cell, {}, job=name))
    job = Job(spec_, backend, plan=plan)
    job.submission = backend.submit(plan, job.feed)
    return job


@pytest.fixture(scope="module")
def loop_job() -> Iterator[Job]:
    job = start("dbg-loop", LOOP, hang_after=1.0, where_locals=True)
    try:
        yield job
    finally:
        if not job.done:
            job.stop()


def test_a_breakpoint_pauses_its_rank_and_answers_pdb_commands(loop_job: Job) -> None:
    job = loop_job
    paused = wait_for(job.paused, 90, f"no rank paused\n{job.logs()}")
    assert [(p.rank, p.line, p.function) for p in paused] == [(1, STOP_LINE, "<module>")]
    assert paused[0].file.startswith("<distrain-cell")
    assert job.monitor.display_state == "Paused"
    assert job.diagnosis() == f"rank 1 paused at cell:{STOP_LINE} in <module>"
    rows = {r.rank: r for r in job.monitor.ranks()}
    assert rows[1].state == "Paused"
    assert all(rows[r].reason == "waiting for rank 1 (paused)" for r in (0, 2, 3))

    # ranks 0, 2 and 3 wait in the all_reduce, and the hang watch (1 s) says no hang
    where = job.where()
    for rank in (0, 2, 3):
        assert "all_reduce" in str(where.stacks[rank]["threads"]), where.text()
    # --where-locals: the cell frame's locals, rank by rank
    shown = [line.strip() for line in where.text().splitlines() if line.startswith("      rank")]
    assert any(line.startswith("rank 2: ") and "step=1" in line for line in shown), shown
    assert not any("torch=" in line or "dist=" in line for line in shown), shown  # no modules
    time.sleep(2.5)  # longer than --hang-after: a paused rank is no hang
    assert job.monitor.hang() is None and job.monitor.display_state == "Paused"

    rank1 = job.debug(1)
    assert rank1.send("p step") == "1\n"
    assert rank1.send("p x.shape") == "torch.Size([2, 3])\n"
    here = rank1.state()
    assert here.paused and dict(here.source)[STOP_LINE].strip() == "y = x * 2"
    stepped = rank1.ask("n")
    assert stepped.paused and stepped.line == STOP_LINE + 1
    assert "t = torch.tensor([float(step)])" in stepped.output
    wait_for(lambda: job.paused()[0].line == STOP_LINE + 1, 10, "the new stop was not announced")
    assert rank1.send("p y.sum().item()") == "24.0\n"
    with pytest.raises(DebugError, match="rank 0 of job dbg-loop is not paused"):
        job.debug(0).send("p 1")

    rank1.cont()
    assert job.wait(90) == "Succeeded"
    assert job.result() == 12.0  # 4 ranks x (0 + 1 + 2)
    assert job.paused() == []


CAST = textwrap.dedent(
    """
    import os, torch.distributed as dist
    rank = dist.get_rank()
    secret = {"a": 1}
    if rank in (1, 3):
        breakpoint()
    if rank == 2:
        secret["missing"]
    dist.barrier()
    rank
    """
)


def test_cast_answers_once_per_paused_rank_and_post_mortem_holds_the_raising_frame() -> None:
    job = start("dbg-cast", CAST, post_mortem=True)
    try:
        paused = wait_for(
            lambda: len(job.paused()) == 3 and job.paused(),
            90,
            f"three ranks did not pause\n{job.logs()}",
        )
        assert [p.rank for p in paused] == [1, 2, 3]
        mortem = paused[1]
        assert mortem.exception == "KeyError: 'missing'" and mortem.function == "<module>"
        assert "after KeyError" in mortem.sentence()

        answers = job.cast("p rank * 10")
        assert {r: a.output for r, a in answers.items()} == {1: "10\n", 2: "20\n", 3: "30\n"}
        # the raising rank's locals, through the API
        assert job.debug(2).send("p secret") == "{'a': 1}\n"
        assert job.debug(2).ask("p os.getpid()").exception == "KeyError: 'missing'"
        pids = [int(job.debug(r).send("p os.getpid()")) for r in (1, 2, 3)]
        assert job.status() == "Running"
    finally:
        job.stop()
    assert job.status() == "Stopped"
    assert_no_processes(jobdir.job_dir("dbg-cast"), pids)


def test_the_channel_refuses_a_client_without_the_job_key() -> None:
    """Every rank stops at pdb.set_trace() (fresh interpreters: the exec launch path); a client
    without the key is refused."""
    cell = "import pdb, torch.distributed as dist\npdb.set_trace()\ndist.barrier()\n1"
    job = start("dbg-auth", cell, mode="exec")
    try:
        paused = wait_for(
            lambda: len(job.paused()) == 4 and job.paused(),
            90,
            f"the ranks did not pause\n{job.logs()}",
        )
        port = paused[0].port
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            hello = wire.recv(sock, job.plan.payload.key, wire.HELLO_LIMIT)  # type: ignore[union-attr]
            wire.send(sock, b"k" * 32, {"op": "hello", "nonce": hello["nonce"]})
            assert sock.recv(1) == b""  # closed: a wrong key says nothing more
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            wire.recv(sock, job.plan.payload.key, wire.HELLO_LIMIT)  # type: ignore[union-attr]
            sock.sendall(framing.HEADER.pack(wire.HELLO_LIMIT + 1))  # over the limit: closed unread
            assert sock.recv(1) == b""
        answers = job.cast("p 6 * 7")
        assert {r: a.output for r, a in answers.items()} == {r: "42\n" for r in range(4)}
        for rank in range(4):
            job.debug(rank).cont()
        assert job.wait(90) == "Succeeded"
    finally:
        if not job.done:
            job.stop()


SPIN = textwrap.dedent(
    """
    import os, time, torch, torch.distributed as dist
    rank = dist.get_rank()
    step = 0
    while not os.path.exists({stop!r}):
        step += 1
        time.sleep(0.01)
    t = torch.tensor([1.0])
    dist.all_reduce(t)
    t.item()
    """
).lstrip()
#: The lines of the loop, where a paused rank stops.
SPIN_LINES = {4, 5, 6}


def test_pause_stops_running_ranks_at_their_next_cell_line(tmp_path: Any) -> None:
    stop = tmp_path / "stop"
    job = start("dbg-pause", SPIN.format(stop=str(stop)), mode="exec")
    try:
        wait_for(
            lambda: job.status() == "Running" and len(job.monitor.ranks()) == 4,
            90,
            f"the job did not run\n{job.logs()}",
        )
        two = job.pause([2], timeout=60)
        assert [(p.rank, p.asked, p.function) for p in two] == [(2, True, "<module>")], job.logs()
        assert two[0].line in SPIN_LINES and two[0].file.startswith("<distrain-cell")
        assert [p.rank for p in job.paused()] == [2]  # the others run on
        before = int(job.debug(2).send("p step"))
        time.sleep(0.5)
        assert int(job.debug(2).send("p step")) == before  # it stays where it stopped
        job.debug(2).cont()
        wait_for(lambda: not job.paused(), 30, "rank 2 did not run on")

        # breakpoints given to the running cell: rank 3 alone stops at the loop's sleep
        assert job.set_breakpoints([{"line": 6, "condition": "rank == 3"}])
        three = wait_for(job.paused, 60, f"rank 3 did not stop\n{job.logs()}")
        assert [(p.rank, p.line, p.asked) for p in three] == [(3, 6, False)], three
        listed = lambda: job.debug(3).send("break")  # noqa: E731  (pdb lists its breakpoints)
        assert "at <distrain-cell>:6" in listed()
        assert job.set_breakpoints([])  # paused rank 3 too: it runs on without them
        wait_for(lambda: "<distrain-cell>" not in listed(), 60, f"rank 3 kept: {listed()}")
        job.debug(3).cont()
        wait_for(lambda: not job.paused(), 30, "rank 3 did not run on")

        every = job.pause(timeout=60)  # no collective in the loop: every rank stops
        assert [p.rank for p in every] == [0, 1, 2, 3], job.logs()
        assert all(p.asked and p.line in SPIN_LINES for p in every), every
        with pytest.raises(BackendError, match="rank 4: job dbg-pause has ranks 0 to 3"):
            job.pause([4])
        stop.write_text("")
        for rank in range(4):
            job.debug(rank).cont()
        assert job.wait(90) == "Succeeded", job.logs()
        assert job.result() == 4.0
    finally:
        if not job.done:
            job.stop()
    with pytest.raises(BackendError, match="has ended"):
        job.pause()
