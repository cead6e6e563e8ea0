"""A rank's debugger on Kubernetes: reached through the API server's port-forward to its pod,
on both Kubeflow APIs (PyTorchJob, TrainJob), and in a session cell."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from jupyter_disttrain.backends.kubernetes import KubernetesBackend
from jupyter_disttrain.job import Job
from jupyter_disttrain.payload import build_payload
from jupyter_disttrain.service import JobService
from jupyter_disttrain.spec import JobSpec
from tests.k8s_emulator.emulator import Emulator
from tests.k8s_emulator.podnet import pod_interface
from tests.test_debugging import LOOP, STOP_LINE
from tests.waiting import wait_for

pytestmark = pytest.mark.slow

APIS = {"pytorchjob": ("kubeflow-v1",), "trainjob": ("trainer",)}


@pytest.fixture(params=sorted(APIS))
def cluster(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[Emulator, str]]:
    """An emulated cluster serving the Kubeflow API of the parameter; KUBECONFIG names it."""
    with Emulator(
        env={"GLOO_SOCKET_IFNAME": pod_interface()}, apis=APIS[request.param]
    ) as emulator:
        monkeypatch.setenv("KUBECONFIG", str(emulator.write_kubeconfig(tmp_path / "kubeconfig")))
        yield emulator, request.param


def test_a_paused_rank_on_another_pod_answers_through_port_forward(
    cluster: tuple[Emulator, str],
) -> None:
    _, api = cluster
    name = f"kdbg-{api}"
    spec = JobSpec(
        name,
        backend="kubernetes",
        nodes=2,
        nproc=2,
        hang_after=1.0,
        options=(("kubeflow_api", api),),
    )
    backend = KubernetesBackend()
    cell = LOOP.replace("rank == 1 and", "rank == 3 and")  # rank 3 runs in node 1's pod
    plan = backend.plan(spec, build_payload(cell, {}, job=name))
    job = Job(spec, backend, plan=plan)
    job.submission = backend.submit(plan, job.feed)
    try:
        wait_for(lambda: job.paused(), 120, job.logs)
        paused = job.paused()
        assert [(p.rank, p.node, p.line) for p in paused] == [(3, 1, STOP_LINE)]
        assert job.monitor.display_state == "Paused"
        rank3 = job.debug(3)
        assert rank3.send("p step") == "1\n"
        assert rank3.send("p x.shape") == "torch.Size([2, 3])\n"
        time.sleep(1.5)  # longer than --hang-after: still no hang while paused
        assert job.monitor.hang() is None
        assert rank3.ask("n").line == STOP_LINE + 1
        rank3.cont()
        assert job.wait(120) == "Succeeded", job.logs()
        assert job.result() == 12.0
    finally:
        if not job.done:
            job.stop()


@pytest.fixture
def trainer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Emulator, str]]:
    """An emulated cluster serving Kubeflow Trainer (TrainJob); KUBECONFIG names it."""
    with Emulator(env={"GLOO_SOCKET_IFNAME": pod_interface()}, apis=APIS["trainjob"]) as emulator:
        monkeypatch.setenv("KUBECONFIG", str(emulator.write_kubeconfig(tmp_path / "kubeconfig")))
        yield emulator, "trainjob"


def test_a_session_cell_pauses_and_continues(trainer: tuple[Emulator, str]) -> None:
    _, api = trainer
    name = f"kdbgs-{api}"
    spec = JobSpec(name, backend="kubernetes", nodes=2, nproc=1, options=(("kubeflow_api", api),))
    service = JobService()
    session = service.start_session(spec)
    try:
        session.run("import torch.distributed as dist\nvalue = 5")
        ran: dict[str, object] = {}

        def cell() -> None:
            ran["value"] = session.run(
                "if dist.get_rank() == 1:\n    breakpoint()\n    value += 1\n"
                "dist.barrier()\nvalue * 10 + dist.get_rank()"
            )

        runner = threading.Thread(target=cell)
        runner.start()
        job = session.job
        wait_for(lambda: job is not None and job.paused(), 120, lambda: session.backend.logs(name))
        assert job is not None
        assert [(p.rank, p.line) for p in job.paused()] == [(1, 3)]
        rank1 = job.debug(1)
        assert rank1.send("p value") == "5\n"
        rank1.send("value = 41")
        rank1.cont()
        runner.join(120)
        assert ran["value"] == 50  # rank 0's value; rank 1 went on with 42
        assert session.run("value") == 5
    finally:
        session.stop()


SPIN = """import time, torch, torch.distributed as dist
step, limit = 0, 10**9
while step < limit:
    step += 1
    time.sleep(0.01)
t = torch.tensor([1.0])
dist.all_reduce(t)
t.item()
"""


def test_running_ranks_pause_on_request_through_the_leader_pods_annotation(
    trainer: tuple[Emulator, str],
) -> None:
    _, api = trainer
    name = f"kpause-{api}"
    spec = JobSpec(name, backend="kubernetes", nodes=2, nproc=2, options=(("kubeflow_api", api),))
    backend = KubernetesBackend()
    plan = backend.plan(spec, build_payload(SPIN, {}, job=name))
    job = Job(spec, backend, plan=plan)
    job.submission = backend.submit(plan, job.feed)
    try:
        wait_for(lambda: len(job.monitor.ranks()) == 4 and job.status() == "Running", 120, job.logs)
        three = job.pause([3], timeout=90)
        assert [(p.rank, p.node, p.asked) for p in three] == [(3, 1, True)], job.logs()
        assert three[0].line in (3, 4, 5)
        job.debug(3).cont()
        wait_for(lambda: not job.paused(), 60, job.logs)
        # breakpoints given to the running cell reach rank 2 in node 1's pod
        assert job.set_breakpoints([{"line": 5, "condition": "dist.get_rank() == 2"}])
        wait_for(lambda: job.paused(), 120, job.logs)
        assert [(p.rank, p.line, p.asked) for p in job.paused()] == [(2, 5, False)]
        listed = lambda: job.debug(2).send("break")  # noqa: E731  (pdb lists its breakpoints)
        assert job.set_breakpoints([])
        wait_for(lambda: "<distrain-cell>" not in listed(), 120, listed)
        job.debug(2).cont()
        wait_for(lambda: not job.paused(), 60, job.logs)
        every = job.pause(timeout=90)
        assert [p.rank for p in every] == [0, 1, 2, 3], job.logs()
        answers = job.cast("!limit = 0")
        assert sorted(answers) == [0, 1, 2, 3]
        for rank in range(4):
            job.debug(rank).cont()
        assert job.wait(120) == "Succeeded", job.logs()
        assert job.result() == 4.0
    finally:
        if not job.done:
            job.stop()
