"""Warm worker groups on the local backend: real torchrun agents, gloo, one live group."""

from __future__ import annotations

import textwrap
from collections.abc import Iterator

import pytest

from jupyter_disttrain import events as ev
from jupyter_disttrain import jobdir
from jupyter_disttrain.service import JobService
from jupyter_disttrain.sessions import Session
from jupyter_disttrain.spec import JobSpec
from tests.conftest import assert_no_processes

pytestmark = pytest.mark.slow


def logs(session: Session) -> str:
    """Every rank's output, for assertion messages."""
    try:
        return session.backend.logs(session.name)
    except Exception as exc:
        return f"(no logs: {exc})"


@pytest.fixture(scope="module")
def service() -> JobService:
    return JobService()


class Pids:
    """Every rank process a session's jobs said hello from."""

    def __init__(self) -> None:
        self.pids: list[int] = []

    def __call__(self, event: ev.Event) -> None:
        if event.kind == "hello":
            self.pids.append(int(event.get("pid")))


@pytest.fixture(scope="module")
def group(service: JobService) -> Iterator[Session]:
    """One 2x2 session shared by the tests that leave it usable; stopping it leaves no process."""
    pids = Pids()
    session = service.start_session(JobSpec("sess-2x2", nodes=2, nproc=2), listeners=[pids])
    yield session
    assert service.stop_session(session.name) in ("Succeeded", "Stopped"), logs(session)
    assert len(pids.pids) >= 4
    assert_no_processes(jobdir.job_dir(session.name), pids.pids)


def test_state_persists_across_cells_on_every_rank(group: Session) -> None:
    build = textwrap.dedent(
        """
        import torch, torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel as DDP
        torch.manual_seed(0)
        model = DDP(torch.nn.Linear(4, 1))
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        me = dist.get_rank()
        steps = 0
        """
    )
    assert group.run(build) is None, logs(group)
    train = textwrap.dedent(
        """
        for _ in range(STEPS):
            x = torch.randn(8, 4)
            loss = ((model(x) - x.sum(1, keepdim=True)) ** 2).mean()
            opt.zero_grad(); loss.backward(); opt.step()
            steps += 1
            report(step=steps, loss=loss)
        gathered = [None] * dist.get_world_size()
        dist.all_gather_object(gathered, (me, steps, model.module.weight.detach().sum().item()))
        gathered
        """
    )
    first = group.run(train, {"STEPS": 3})
    second = group.run(train, {"STEPS": 2})
    assert [r for r, _, _ in first] == [0, 1, 2, 3], logs(group)
    assert [s for _, s, _ in first] == [3] * 4
    assert [s for _, s, _ in second] == [5] * 4  # every rank kept its counter
    assert len({w for _, _, w in second}) == 1  # DDP kept the replicas equal
    assert len({w for _, _, w in first} | {w for _, _, w in second}) == 2
