"""An agent the launcher forked asks it for its workers itself (runtime/launcher_handle.py):
no fork client runs, each worker is the launcher's child that torchrun knows by its own pid,
and how a worker ended reaches torchrun as a ``Popen`` would say it."""

from __future__ import annotations

import textwrap
import time
from pathlib import Path

import pytest

from jupyter_disttrain.backends.local.launcher import shared_launcher
from jupyter_disttrain.monitor.core import JobMonitor
from jupyter_disttrain.runtime import forkclient, launcher_handle
from jupyter_disttrain.spec import JobSpec
from tests.backends.local.test_backend import job_logs, run_job
from tests.conftest import assert_no_processes


def test_the_fork_clients_command_is_known_by_its_arguments() -> None:
    command = list(forkclient.torchrun_command()[1:])  # the interpreter, then its arguments
    assert launcher_handle.is_fork_client([*command[1:], "/job/payload.pkl"]) is False
    assert launcher_handle.is_fork_client([*command, "/job/payload.pkl"]) is True
    assert launcher_handle.is_fork_client(command) is False  # no payload
    assert launcher_handle.is_fork_client(["-m", "jupyter_disttrain.runtime.localworker", "p"]) is (
        False
    )


CELL = textwrap.dedent(
    """
    import os, signal, time, torch.distributed as dist
    dist.barrier()
    report(step=0, pid=float(os.getpid()), parent=float(os.getppid()))
    if dist.get_rank() == 3:
        time.sleep(1)  # the others' values are out
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(60)  # the others wait until their agent stops them
    """
)


@pytest.mark.slow
def test_workers_are_the_launchers_children_and_a_killed_one_fails_the_job_at_once() -> None:
    started = time.monotonic()
    sink, run = run_job(JobSpec("handle-kill", nodes=2, nproc=2, timeout=100), CELL)
    took = time.monotonic() - started
    logs = job_logs(run)
    final = sink.final()
    assert final.get("state") == "Failed", logs
    mon = JobMonitor("handle-kill", "local", 4, nodes=2, nproc=2)
    mon.feed_many(sink.events)
    cause = mon.cause()  # torchrun's word on the pid it knows names the rank
    assert cause is not None, (final.fields, logs)
    assert (cause.rank, cause.category, cause.reason) == (3, "killed", "exit code -9 (SIGKILL)"), (
        cause,
        logs,
    )
    assert took < 40, (took, logs)
    launcher = shared_launcher()
    hellos = sink.kinds("hello")
    assert sorted(e.rank for e in hellos) == [0, 1, 2, 3], logs
    # torchrun started no process of its own for a rank: the pid it knows is the worker's
    assert all(e.get("launched_pid") == e.get("pid") for e in hellos), [e.fields for e in hellos]
    parents = {int(dict(e.get("values"))["parent"]) for e in sink.kinds("metric")}
    assert parents == {launcher.pid}, (parents, launcher.pid, logs)
    assert "could not fork this worker" not in logs, logs
    # none is left, a fork client among them (it names the job's payload)
    assert_no_processes(Path(run.plan.job_dir), sink.pids())
