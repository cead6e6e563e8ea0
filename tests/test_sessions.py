"""Warm worker groups on the local backend: real torchrun agents, gloo, one live group."""

from __future__ import annotations

import json
import re
import socket
import struct
import textwrap
import threading
import time
from collections.abc import Iterator

import pytest

from jupyter_disttrain import events as ev
from jupyter_disttrain.backends.local import jobdir
from jupyter_disttrain.job import Job
from jupyter_disttrain.runtime.session import HELLO_SECONDS, recv_frame, send_frame
from jupyter_disttrain.service import JobService
from jupyter_disttrain.session_list import format_sessions
from jupyter_disttrain.sessions import (
    Session,
    SessionError,
    SessionLost,
    bound_names,
    session_spec,
)
from jupyter_disttrain.spec import JobSpec, SpecError
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


def test_error_on_one_rank_is_raised_with_its_rank_and_the_session_stays_usable(
    group: Session,
) -> None:
    group.run("counter = 41")
    cell = textwrap.dedent(
        """
        import torch.distributed as dist
        def check(rank):
            if rank == 2:
                raise KeyError(f"missing column on rank {rank}")
        check(dist.get_rank())
        """
    )
    jobs: list[Job] = []
    with pytest.raises(KeyError) as caught:
        group.run(cell, on_cell=jobs.append)
    # the cell's job: the raising rank is its cause, the others are ready for the next cell
    (cell_job,) = jobs
    assert cell_job.monitor.reason == "rank 2: KeyError: 'missing column on rank 2'", logs(group)
    assert [r.state for r in cell_job.monitor.ranks()] == ["Ready", "Ready", "Raised", "Ready"]
    message = str(caught.value)
    assert "[rank 2]" in message and "missing column on rank 2" in message, logs(group)
    assert "Remote traceback (rank 2)" in message and "in check" in message
    assert caught.value.remote_rank == 2  # type: ignore[attr-defined]
    assert group.run("counter += 1\ncounter") == 42  # the ranks kept their state
    assert group.status() == "idle"


def test_errors_on_several_ranks_name_the_others(group: Session) -> None:
    with pytest.raises(ZeroDivisionError) as caught:
        group.run("import torch.distributed as dist\n1 / (dist.get_rank() % 2)")
    assert "[rank 0]" in str(caught.value)
    assert any("rank(s) 2 raised too" in note for note in caught.value.__notes__)


def test_interrupt_outside_a_collective_keeps_the_state(group: Session) -> None:
    group.run("kept = 'still here'")
    cell = "import time\nfor _ in range(600):\n    time.sleep(0.1)"
    timer = threading.Timer(1.5, group.interrupt)
    timer.start()
    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt, match="interrupted on every rank"):
        group.run(cell)
    assert time.monotonic() - started < 15, logs(group)
    assert group.run("kept") == "still here"
    assert group.restarts == 0


def test_session_is_listed_as_a_session(service: JobService, group: Session) -> None:
    listing = service.list_jobs()
    record = next(r for r in listing.records if r.name == group.name)
    assert record.extra.get("source") == "session" and record.state == "Running"
    assert group.name in format_sessions(service.sessions.all())


def test_captured_notebook_values_do_not_replace_what_a_cell_bound(group: Session) -> None:
    group.run("shadow = 'rank value'")
    assert group.run("shadow", {"shadow": "notebook value"}) == "rank value"
    assert group.run("fresh", {"fresh": "notebook value"}) == "notebook value"


def test_interrupt_of_a_cell_stuck_in_a_collective_restarts_the_group(group: Session) -> None:
    group.run("kept = 'old group'")
    cell = textwrap.dedent(
        """
        import time, torch.distributed as dist
        if dist.get_rank() == 1:
            while True:
                time.sleep(0.1)
        dist.barrier()  # the others wait here, inside gloo, for rank 1
        """
    )
    restarts = group.restarts
    timer = threading.Timer(2.0, group.interrupt)
    timer.start()
    started = time.monotonic()
    with pytest.raises(SessionLost) as caught:
        group.run(cell)
    message = str(caught.value)
    assert "rank(s) 0, 2, 3 did not come back" in message, logs(group)
    assert "restarted its group" in message and "state was lost" in message
    assert time.monotonic() - started < 60
    assert group.restarts == restarts + 1 and group.alive
    with pytest.raises(NameError, match="kept"):
        group.run("kept")
    assert group.run("import torch.distributed as dist\ndist.get_world_size()") == 4


def test_a_rank_that_dies_restarts_the_group_and_says_so(group: Session) -> None:
    group.run("kept = 1")
    cell = textwrap.dedent(
        """
        import os, time, torch.distributed as dist
        if dist.get_rank() == 3:
            os._exit(7)
        time.sleep(30)
        """
    )
    with pytest.raises(SessionLost) as caught:
        group.run(cell)
    message = str(caught.value)
    assert "a rank died" in message and "exit" in message, message + logs(group)
    assert "restarted its group" in message and "state was lost" in message
    assert group.run("import torch.distributed as dist\ndist.get_rank()") == 0
    with pytest.raises(NameError):
        group.run("kept")


def test_a_wrong_token_is_refused_and_the_session_stays_usable(group: Session) -> None:
    assert group.port is not None and group.job is not None
    record = group._record()
    with group.backend.connect(record, group.port, 10.0) as sock:
        send_frame(sock, json.dumps({"token": "not-the-token"}).encode())
        answer = json.loads(recv_frame(sock))
    assert answer == {
        "ok": False,
        "world_size": 4,
        "pid": answer["pid"],
        "error": "wrong session token",
    }
    assert group.run("6 * 7") == 42


def test_idle_timeout_ends_the_session(service: JobService) -> None:
    session = service.start_session(JobSpec("sess-idle", nodes=1, nproc=2), idle_timeout=4.0)
    try:
        assert session.run("1") == 1
        assert session.job is not None
        assert session.job.wait(30) == "Succeeded", logs(session)
        assert "no cell for 4 s (--idle-timeout)" in logs(session)
        with pytest.raises(SessionError, match="restart sess-idle"):
            session.run("1")
        assert service.restart_session("sess-idle").run("2") == 2
    finally:
        service.stop_session("sess-idle")
    assert_no_processes(jobdir.job_dir("sess-idle"))


def test_bound_names_are_what_the_top_level_of_a_cell_binds() -> None:
    source = "import torch as t\nfrom os import path\nx = 1\ndef f(): y = 2\nclass C: z = 3\nw"
    assert bound_names(source) == {"t", "path", "x", "f", "C"}
    assert bound_names("def broken(:") == set()


@pytest.mark.parametrize(
    ("changes", "needle"),
    [
        ({"framework": "tensorflow", "nproc": 1}, "sessions run PyTorch or JAX ranks"),
        ({"max_restarts": 2}, "remove --max-restarts"),
        ({"resume": "/tmp/ckpt"}, "call load_checkpoint(URI) in a cell"),
    ],
)
def test_what_a_session_cannot_run_is_a_spec_error(changes: dict[str, object], needle: str) -> None:
    with pytest.raises(SpecError, match=re.escape(needle)):
        session_spec(JobSpec("s", **changes))  # type: ignore[arg-type]


def test_a_session_spec_is_labelled_and_never_reads_silence_as_a_hang() -> None:
    spec = session_spec(JobSpec("s", nodes=2, labels=(("team", "a"),)))
    assert dict(spec.labels) == {"team": "a", "source": "session"} and spec.hang_after == 0


def test_a_lost_connection_reconnects_and_keeps_the_ranks_state(group: Session) -> None:
    group.run("kept = 'across the reconnect'")
    timer = threading.Timer(1.0, lambda: group._sock.shutdown(socket.SHUT_RDWR))  # type: ignore[union-attr]
    timer.start()
    with pytest.raises(SessionError, match="connection to rank 0 was lost"):
        group.run("import time\ntime.sleep(3)")
    assert group.run("kept") == "across the reconnect", logs(group)
    assert group.alive


def test_silent_clients_holding_rank_zeros_port_do_not_delay_a_cell(group: Session) -> None:
    assert group.port is not None
    record = group._record()
    group.run("1")  # warm
    silent = [group.backend.connect(record, group.port, 10.0) for _ in range(3)]
    try:
        time.sleep(0.2)  # rank 0 accepted them; none says hello
        started = time.monotonic()
        assert group.run("2 + 2") == 4
        took = time.monotonic() - started
        assert took < HELLO_SECONDS, (took, logs(group))  # not held up by one hello deadline
        deadline = time.monotonic() + HELLO_SECONDS + 6.0
        for sock in silent:  # each is dropped at its hello deadline
            sock.settimeout(max(0.1, deadline - time.monotonic()))
            assert sock.recv(1) == b""
    finally:
        for sock in silent:
            sock.close()


def test_a_client_declaring_a_huge_frame_is_dropped_without_it_being_read(group: Session) -> None:
    assert group.port is not None
    with group.backend.connect(group._record(), group.port, 10.0) as sock:
        sock.sendall(struct.pack(">I", 1 << 30) + b"{" * 1000)  # a 1 GiB hello, 1000 bytes sent
        sock.settimeout(HELLO_SECONDS)
        started = time.monotonic()
        try:
            closed = sock.recv(1) == b""
        except ConnectionResetError:
            closed = True
        assert closed and time.monotonic() - started < 2.0
    assert group.run("6 * 7") == 42


def test_a_cell_raising_on_every_rank_says_so_once_and_the_session_stays_usable(
    group: Session,
) -> None:
    jobs: list[Job] = []
    with pytest.raises(ValueError):
        group.run("raise ValueError('bad shape')", on_cell=jobs.append)
    (cell_job,) = jobs
    mon = cell_job.monitor
    # every rank raised the same: said once for all, no rank blamed as a consequence of another
    assert mon.reason == "all 4 ranks: ValueError: bad shape", logs(group)
    assert [r.reason for r in mon.ranks()] == ["ValueError: bad shape"] * 4, logs(group)
    # the ranks raised and live on: the cell reads Raised, not Failed, and says what comes next
    assert [r.state for r in mon.ranks()] == ["Raised"] * 4, logs(group)
    assert mon.display_state == "Raised", logs(group)
    ready = "the cell raised on all 4 ranks; the session is ready for the next cell"
    assert mon.diagnosis() == ready, logs(group)
    assert group.run("1 + 1") == 2  # the session is still usable
    assert group.status() == "idle"
